# Makes a copy of Debian's libjemalloc_pic.a whose public symbols carry a `d9_je_` prefix,
# so jemalloc can live inside libd9.so under libd9's own exported malloc family.
# Usage: cmake -DIN=... -DOUT=... -DNM=... -DOBJCOPY=... -P prefix_jemalloc.cmake
execute_process(COMMAND ${NM} -g --defined-only ${IN} OUTPUT_VARIABLE syms
                COMMAND_ERROR_IS_FATAL ANY)
string(REPLACE "\n" ";" lines "${syms}")
set(map "")
foreach(line IN LISTS lines)
  # "<addr> <type> <name>"; jemalloc's internals are already je_-prefixed.
  if(line MATCHES "^[0-9a-f]+ [A-Za-z] (.+)$")
    set(name "${CMAKE_MATCH_1}")
    if(NOT name MATCHES "^je_" AND NOT name MATCHES "^DW\\.ref\\.")
      string(APPEND map "${name} d9_je_${name}\n")
    endif()
  endif()
endforeach()
file(WRITE ${OUT}.syms "${map}")
execute_process(COMMAND ${OBJCOPY} --redefine-syms=${OUT}.syms ${IN} ${OUT}
                COMMAND_ERROR_IS_FATAL ANY)
