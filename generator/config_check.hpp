// Checks of an FA4Config that need no arch: field ranges, the mask tree's shape and conflicting
// fields, snippets. resolve() runs them on every config before copying it; config_from_json runs
// them too, so a JSON file is refused at load time with the JSON path of the field.
#pragma once
#include <span>
#include <string>

#include "fa4jit/config.hpp"

namespace jit::detail {

// Throws ConfigError naming the field as a JSON path under `prefix` ("" or e.g. "configs[2]").
void check_structure(const FA4Config& c, const std::string& prefix = "");

// "depth" under "" is "depth"; under "configs[2]" it is "configs[2].depth".
std::string json_path(const std::string& prefix, const std::string& field);

// Every integer field with its inclusive range (0 means "derive" where it is allowed). The arch
// narrows these further in resolve(); the ranges keep the arithmetic there far from overflow.
struct IntField {
  const char* name;
  int lo, hi;
  int FA4Config::*member;
};
std::span<const IntField> int_fields();

}  // namespace jit::detail
