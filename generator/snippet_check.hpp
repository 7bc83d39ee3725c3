// Snippets are trusted code pasted verbatim into the generated source (README, docs/VARIANTS.md),
// so nothing here is a sandbox. These checks only make sure a snippet stays inside the function
// body it is pasted into: an unbalanced `}` would close the generated function, a `#define` would
// rewrite the templates included after it, an open comment would swallow the rest of the file.
#pragma once
#include <string>

namespace jit::detail {

// Throws ConfigError "<what> line N: ..." (what: e.g. "mask snippet", "mask.masks[1] block_snippet")
// for: more than kMaxSnippetBytes, a NUL byte, a preprocessor directive line (`#...`, `%:...`),
// brackets ( [ { that do not balance or nest deeper than kMaxSnippetNesting (outside comments and
// string / character literals), an unterminated comment or literal, a trailing line splice.
void check_snippet(const std::string& body, const std::string& what);

}  // namespace jit::detail
