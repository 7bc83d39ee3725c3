# ctest fa4jit_shared_library_exports: libfa4jit.so has its SONAME and exports the public API
# (include/fa4jit, FA4JIT_API) and none of the internals or the private dependencies.
# Args: LIB (the built library), SONAME (expected, e.g. libfa4jit.so.0).
find_program(READELF readelf REQUIRED)
find_program(NM nm REQUIRED)
execute_process(COMMAND ${READELF} -d ${LIB} OUTPUT_VARIABLE dyn COMMAND_ERROR_IS_FATAL ANY)
if(NOT dyn MATCHES "\\(SONAME\\)[^\n]*\\[${SONAME}\\]")
  message(FATAL_ERROR "${LIB}: SONAME is not ${SONAME}:\n${dyn}")
endif()
execute_process(COMMAND ${NM} -D -C --defined-only ${LIB} OUTPUT_VARIABLE syms COMMAND_ERROR_IS_FATAL ANY)
string(REPLACE "\n" ";" lines "${syms}")
set(leaks)
set(count 0)
foreach(line IN LISTS lines)
  # "<address> <type> <name>"; std:: template instances (weak, default visibility by libstdc++'s
  # own pragmas) are allowed, internal namespaces and private dependencies are not.
  if(line MATCHES "^[0-9a-f]+ [A-Za-z] (.*)$")
    set(name "${CMAKE_MATCH_1}")
    math(EXPR count "${count} + 1")
    if(name MATCHES "^((typeinfo|typeinfo name|vtable|VTT|guard variable) for )?(jit::detail::|jit::cache::|jit::testing::|fmt::|nlohmann::|XXH|redis|CLI::)")
      list(APPEND leaks "${name}")
    endif()
  endif()
endforeach()
if(leaks)
  list(JOIN leaks "\n  " leaks)
  message(FATAL_ERROR "${LIB} exports internals:\n  ${leaks}")
endif()
foreach(api IN ITEMS "jit::get_kernel(jit::FA4Config const&, jit::ResolveOptions const&)"
                     "jit::resolve(jit::FA4Config const&, jit::ResolveOptions const&)" "jit::parse_tune("
                     "jit::Mask::causal(bool)" "jit::runtime_info()" "jit::stats()" "jit::set_log_sink("
                     "typeinfo for jit::ConfigError" "typeinfo for jit::Kernel")
  string(FIND "${syms}" "${api}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${LIB} does not export ${api}")
  endif()
endforeach()
message(STATUS "${LIB}: SONAME ${SONAME}, ${count} exported symbols, no internals")
