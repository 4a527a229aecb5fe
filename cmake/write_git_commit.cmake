# Writes OUTPUT (a header defining GPULAB_GIT_COMMIT) from `git describe` of SOURCE_DIR, run at every
# build (target gpulab_git_commit) so that a result records the commit it was built from, not the
# one CMake was configured at. The file is rewritten only when the text changes. Outside a git
# checkout (a source tarball, a .deb build, a copy of the working tree on the GPU host) the commit is
# $GPULAB_GIT_COMMIT when the environment sets it, else "unknown"; "-dirty" marks uncommitted
# changes.
execute_process(
  COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12 --exclude "*"
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  if(NOT "$ENV{GPULAB_GIT_COMMIT}" STREQUAL "")
    set(commit "$ENV{GPULAB_GIT_COMMIT}")
  else()
    set(commit "unknown")
  endif()
endif()
set(text "// Generated at build time by cmake/write_git_commit.cmake.\n#pragma once\n#define GPULAB_GIT_COMMIT \"${commit}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
