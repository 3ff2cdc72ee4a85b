# The CMake package: installs this build to a scratch prefix, then configures and builds
# examples/ on its own with find_package(kiqd), and runs the built daemon's check-config with
# the built plugin. Run by ctest as `package`:
#   cmake -DSOURCE_DIR=... -DBINARY_DIR=... -DWORK_DIR=... -P package_test.cmake
foreach(var SOURCE_DIR BINARY_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${WORK_DIR}/build
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build -j2)
file(WRITE ${WORK_DIR}/kiqd.yml
  "queues: [default]\nserver_middleware: [timing]\nplugins: [${WORK_DIR}/build/libimage_jobs.so]\n")
run(${WORK_DIR}/build/my_kiqd check-config -C ${WORK_DIR}/kiqd.yml)
if(NOT last_output MATCHES "is valid: .* 1 plugin")
  message(FATAL_ERROR "unexpected check-config output: ${last_output}")
endif()
message(STATUS "package OK: ${last_output}")
file(REMOVE_RECURSE ${WORK_DIR})
