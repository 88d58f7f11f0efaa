# ctest install.host_example: installs this build into a fresh prefix and
# builds and runs runtime/examples/host_append against it, as an application
# would (find_package(kvgen), kvgen::kvgen at build time, kvgen::kvrt).
#
#   cmake -DBUILD_DIR=<kvgen build> -DSOURCE_DIR=<checkout> -DWORK_DIR=<dir>
#         [-DGENERATOR=Ninja] -P cmake/InstallTest.cmake
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "InstallTest.cmake needs -D${var}=...")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "install test: ${what}: ok")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
set(example "${WORK_DIR}/example")
run("cmake --install" ${CMAKE_COMMAND} --install "${BUILD_DIR}"
  --prefix "${prefix}")
foreach(f bin/kvgen bin/kvgen-opt include/kvrt/kvrt.h)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "install test: the install lacks ${f}")
  endif()
endforeach()
set(gen)
if(GENERATOR)
  set(gen -G "${GENERATOR}")
endif()
# Only the prefix: the build tree's package must not be what is found.
run("configure the example" ${CMAKE_COMMAND} ${gen}
  -S "${SOURCE_DIR}/runtime/examples/host_append" -B "${example}"
  -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}"
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
file(STRINGS "${example}/CMakeCache.txt" dir REGEX "^kvgen_DIR:")
if(NOT dir MATCHES "${prefix}")
  message(FATAL_ERROR "install test: the example found kvgen at ${dir}, "
    "not in ${prefix}")
endif()
run("build the example" ${CMAKE_COMMAND} --build "${example}")
run("run the example" "${example}/kvrt-host-append")
message(STATUS "${last_output}")
file(REMOVE_RECURSE "${WORK_DIR}")
