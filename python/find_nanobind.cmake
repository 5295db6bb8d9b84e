# Finds the Python the package's tests run in and nanobind in it, for CMakeLists.txt: sets MINIGPT_HAVE_PYTHON,
# or MINIGPT_PYTHON_WHY to why not (MINIGPT_PYTHON=ON makes that an error).
#
# The interpreter: pip's (scikit-build-core passes Python_EXECUTABLE), else the project's .venv (made by
# scripts/venv.sh; ctest runs the tests with it, so the module is built for its Python), else the first on PATH.
if(NOT SKBUILD AND EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
  set(Python_EXECUTABLE ${PROJECT_SOURCE_DIR}/.venv/bin/python CACHE FILEPATH "The Python the extension module is built for" FORCE)
endif()
find_package(Python 3.9 COMPONENTS Interpreter Development.Module QUIET)
if(NOT Python_FOUND)
  set(MINIGPT_PYTHON_WHY "no Python 3.9+ with its development headers (Debian: python3-dev)")
else()
  execute_process(COMMAND ${Python_EXECUTABLE} -m nanobind --cmake_dir OUTPUT_VARIABLE MINIGPT_NANOBIND_DIR
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(NOT rc EQUAL 0)
    set(MINIGPT_PYTHON_WHY "${Python_EXECUTABLE} has no nanobind")
  else()
    find_package(nanobind CONFIG QUIET PATHS ${MINIGPT_NANOBIND_DIR} NO_DEFAULT_PATH)
    if(NOT nanobind_FOUND)
      set(MINIGPT_PYTHON_WHY "nanobind's CMake files are not in ${MINIGPT_NANOBIND_DIR}")
    else()
      set(MINIGPT_HAVE_PYTHON ON)
    endif()
  endif()
endif()
if(MINIGPT_HAVE_PYTHON)
  message(STATUS "minigpt: building the Python extension module for ${Python_EXECUTABLE} (${Python_VERSION})")
elseif(MINIGPT_PYTHON STREQUAL "ON")
  message(FATAL_ERROR "MINIGPT_PYTHON=ON but ${MINIGPT_PYTHON_WHY}")
else()
  message(STATUS "minigpt: not building the Python extension module: ${MINIGPT_PYTHON_WHY}")
endif()
