# Writes OUTPUT (a header defining GPULAB_GIT_COMMIT) from `git describe` of SOURCE_DIR, run at every
# build (target gpulab_git_commit) so that a result records the commit it was built from, not the
# one CMake was configured at. The file is rewritten only when the text changes.
# $GPULAB_GIT_COMMIT, when set at build time (letters, digits, . _ + -: it lands in a C string
# literal), names the commit instead: outside a git checkout (a source tarball, the Docker build,
# whose context leaves .git out) there is nothing to describe, and the GPU host's copy of a working
# tree carries a .git whose HEAD is not the commit that was copied (a sweep built there from
# 8506622 recorded "77dd3cb33863-dirty", main's HEAD, on 2026-12-05). Else "unknown" outside git;
# "-dirty" marks uncommitted changes.
set(commit "$ENV{GPULAB_GIT_COMMIT}")
if(commit STREQUAL "")
  execute_process(
    COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12 --exclude "*"
    OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    set(commit "")
  endif()
endif()
if(NOT commit MATCHES "^[0-9A-Za-z._+-]+$")
  set(commit "unknown")
endif()
set(text "// Generated at build time by cmake/write_git_commit.cmake.\n#pragma once\n#define GPULAB_GIT_COMMIT \"${commit}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
