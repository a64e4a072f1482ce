# Makes a copy of Debian's libjemalloc_pic.a whose public symbols carry a `d9_je_` prefix,
# so jemalloc can live inside libd9.so under libd9's own exported malloc family.
# Usage: cmake -DIN=... -DOUT=... -DNM=... -DOBJCOPY=... -DAR=... -P prefix_jemalloc.cmake
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

# jemalloc's own operator new is the fast path of d9's (preload/fast_path.S). Past its fast
# path it calls malloc_default, and on an empty result runs a new-handler loop of its own
# that swaps a handler's std::bad_alloc subclass for a plain one. In its C++ object only,
# that call goes to d9_new_slow (preload/hooks.cc) instead, which runs the standard loop and
# never returns NULL.
execute_process(COMMAND ${AR} t ${OUT} OUTPUT_VARIABLE members COMMAND_ERROR_IS_FATAL ANY)
string(REGEX MATCH "jemalloc_cpp[^\n]*\\.o" cpp_member "${members}")
if(NOT cpp_member)
  message(FATAL_ERROR "${IN} has no jemalloc_cpp object: jemalloc was built without C++")
endif()
set(dir ${OUT}.cpp)
file(REMOVE_RECURSE ${dir})
file(MAKE_DIRECTORY ${dir})
execute_process(COMMAND ${AR} x ${OUT} ${cpp_member} WORKING_DIRECTORY ${dir}
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${OBJCOPY} --redefine-sym je_malloc_default=d9_new_slow ${cpp_member}
                WORKING_DIRECTORY ${dir} COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${NM} -u ${cpp_member} WORKING_DIRECTORY ${dir}
                OUTPUT_VARIABLE undefined COMMAND_ERROR_IS_FATAL ANY)
if(NOT undefined MATCHES "d9_new_slow")
  message(FATAL_ERROR "jemalloc's operator new no longer calls je_malloc_default")
endif()
execute_process(COMMAND ${AR} r ${OUT} ${cpp_member} WORKING_DIRECTORY ${dir}
                COMMAND_ERROR_IS_FATAL ANY)
file(REMOVE_RECURSE ${dir})
