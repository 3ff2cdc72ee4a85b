# The CMake package: installs this build to a scratch prefix, then configures and builds
# examples/ on its own with find_package(kiqd), and runs the built daemon's check-config with
# the built plugin. The installed kiqd-ruby-runner must find its library where the install put
# it: with RUBY given, tests/runners/installed_runner_check.rb starts it on a socketpair and
# checks which library it loaded. Run by ctest as `package`:
#   cmake -DSOURCE_DIR=... -DBINARY_DIR=... -DWORK_DIR=... [-DRUBY=...] -P package_test.cmake
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
set(runner ${WORK_DIR}/prefix/bin/kiqd-ruby-runner)
set(runner_lib ${WORK_DIR}/prefix/share/kiqd/ruby/lib)
foreach(f ${runner} ${runner_lib}/kiqd/runner.rb ${runner_lib}/kiqd/runner/server.rb)
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "the install has no ${f}")
  endif()
endforeach()
if(RUBY)
  run(${RUBY} ${SOURCE_DIR}/tests/runners/installed_runner_check.rb ${runner} ${runner_lib})
  message(STATUS "${last_output}")
else()
  message(STATUS "no Ruby: the installed kiqd-ruby-runner was not started")
endif()
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
