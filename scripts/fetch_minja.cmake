# minja (Google's C++ Jinja engine for chat templates, MIT; what llama-server rendered templates with from
# January to October 2025) into third_party/minja/ (ignored by git), from the one place our package sources
# have it: the llama.cpp source vendored in the llama_cpp_python 0.3.16 sdist on PyPI (its newest with minja;
# later ones carry llama.cpp's own engine, which is not a separate library). Debian packages no C++ Jinja
# engine. The sdist and the two headers are checked against their SHA-256 before use. minja.hpp then gets
# one patch of ours, scripts/minja_limits.patch: a bound on nested macro calls (a template's macro that
# recursed without end overflowed the stack and killed the server), on range() (a zero step looped forever;
# range(10**9) took ~100 GB), on one render's loop iterations and macro calls, and on the strings, lists and
# output it builds, and is checked again.
#
# CMakeLists.txt includes this at configure time, so that a fresh clone builds (`pip install .` too) without a
# step of its own; it does nothing when the patched headers are there. By hand: cmake -P scripts/fetch_minja.cmake
# (scripts/fetch_minja.sh). Offline: MINIGPT_MINJA_SDIST=/path/to/llama_cpp_python-0.3.16.tar.gz in the
# environment uses that file (checked the same way) instead of the download.
if(CMAKE_SCRIPT_MODE_FILE)  # cmake -P; included, the project's own settings hold
  cmake_minimum_required(VERSION 3.20)
endif()

function(minigpt_fetch_minja)
  get_filename_component(root ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/.. ABSOLUTE)
  set(version 0.3.16)
  set(sdist_url "https://files.pythonhosted.org/packages/e4/b4/c8cd17629ced0b9644a71d399a91145aedef109c0333443bef015e45b704/llama_cpp_python-${version}.tar.gz")
  set(sdist_sha256 34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6)
  set(sha_minja abb5e1378834908ec8ae3035fae0a82b7b36e214f5808c7df50ccf0048acbcd1)
  set(sha_chat e1a86f8f1cce246670ae02c126bd407d2cc0a30655ca1e65b0d52c6bd1b0eca6)
  set(sha_patched d8e73697229ad21e19b54d110dc5a90e5a04fe18835e259ccb3cc7f5241ea5ab)
  set(dest ${root}/third_party/minja)
  set(headers ${dest}/include/minja)

  # The SHA-256 of a file, empty when it is not there.
  macro(minigpt_sha_of file out)
    set(${out} "")
    if(EXISTS ${file})
      file(SHA256 ${file} ${out})
    endif()
  endmacro()
  minigpt_sha_of(${headers}/minja.hpp have_minja)
  minigpt_sha_of(${headers}/chat-template.hpp have_chat)
  if(have_minja STREQUAL sha_patched AND have_chat STREQUAL sha_chat)
    return()
  endif()

  if(NOT (have_minja STREQUAL sha_minja AND have_chat STREQUAL sha_chat))
    # Not there (or not these headers): from the sdist.
    set(tmp ${root}/third_party/.minja-download)
    file(REMOVE_RECURSE ${tmp})
    file(MAKE_DIRECTORY ${tmp})
    if(DEFINED ENV{MINIGPT_MINJA_SDIST})
      set(sdist $ENV{MINIGPT_MINJA_SDIST})
      minigpt_sha_of(${sdist} got)
      if(NOT got STREQUAL sdist_sha256)
        file(REMOVE_RECURSE ${tmp})
        message(FATAL_ERROR "fetch_minja: ${sdist} (MINIGPT_MINJA_SDIST) has SHA-256 '${got}', expected "
                            "${sdist_sha256} (llama_cpp_python-${version}.tar.gz)")
      endif()
    else()
      set(sdist ${tmp}/llama_cpp_python-${version}.tar.gz)
      message(STATUS "fetch_minja: downloading the llama_cpp_python ${version} sdist from PyPI (50 MB) for minja, "
                     "the chat templates' engine")
      file(DOWNLOAD ${sdist_url} ${sdist} EXPECTED_HASH SHA256=${sdist_sha256} TLS_VERIFY ON STATUS status)
      list(GET status 0 code)
      if(NOT code EQUAL 0)
        list(GET status 1 why)
        file(REMOVE_RECURSE ${tmp})
        message(FATAL_ERROR "fetch_minja: could not download ${sdist_url}: ${why} (offline: set "
                            "MINIGPT_MINJA_SDIST to a copy of llama_cpp_python-${version}.tar.gz)")
      endif()
    endif()
    set(src llama_cpp_python-${version}/vendor/llama.cpp)
    file(ARCHIVE_EXTRACT INPUT ${sdist} DESTINATION ${tmp}
         PATTERNS ${src}/vendor/minja/minja.hpp ${src}/vendor/minja/chat-template.hpp ${src}/LICENSE)
    foreach(pair "minja.hpp;${sha_minja}" "chat-template.hpp;${sha_chat}")
      list(GET pair 0 name)
      list(GET pair 1 want)
      minigpt_sha_of(${tmp}/${src}/vendor/minja/${name} got)
      if(NOT got STREQUAL want)
        file(REMOVE_RECURSE ${tmp})
        message(FATAL_ERROR "fetch_minja: ${name} has SHA-256 '${got}', expected ${want}")
      endif()
    endforeach()
    file(REMOVE_RECURSE ${dest})
    file(MAKE_DIRECTORY ${headers})
    file(COPY ${tmp}/${src}/vendor/minja/minja.hpp ${tmp}/${src}/vendor/minja/chat-template.hpp
         DESTINATION ${headers})
    # minja's own copyright line is in each header (Google LLC, MIT); llama.cpp's LICENSE is the MIT text it
    # ships under.
    file(COPY ${tmp}/${src}/LICENSE DESTINATION ${dest})
    file(REMOVE_RECURSE ${tmp})
  endif()

  # minja.hpp as downloaded + the patch -> checked
  find_program(GIT git)
  if(NOT GIT)
    message(FATAL_ERROR "fetch_minja: git is needed to apply scripts/minja_limits.patch (apt-get install git)")
  endif()
  execute_process(COMMAND ${GIT} apply --unsafe-paths --directory=third_party/minja/include/minja -p1
                          scripts/minja_limits.patch
                  WORKING_DIRECTORY ${root} RESULT_VARIABLE failed)
  minigpt_sha_of(${headers}/minja.hpp have_minja)
  if(failed OR NOT have_minja STREQUAL sha_patched)
    message(FATAL_ERROR "fetch_minja: minja.hpp after scripts/minja_limits.patch is not what it should be")
  endif()
  message(STATUS "fetch_minja: minja headers in ${dest}/include/minja (patched)")
endfunction()

minigpt_fetch_minja()
