# SPDX-License-Identifier: Apache-2.0
# bpf_object(NAME SOURCES src.bpf.c... HEADERS hdr.h... [ATOMICS src.bpf.c...])
#
# Compiles each BPF source with clang for the BPF target, links the objects into one with
# `bpftool gen object` (so every probe family lives in its own file yet shares maps), generates a
# libbpf skeleton with `bpftool gen skeleton`, and defines an INTERFACE target NAME_skel whose include
# path holds NAME.skel.h. HEADERS are real dependencies: editing one rebuilds the objects.
# Every object not listed in ATOMICS is checked (check_bpf_atomics.sh) to hold no atomic instruction
# that kernels before 5.12 refuse; the ATOMICS ones have a pre-5.12 twin built from the same source.
function(bpf_object NAME)
  cmake_parse_arguments(ARG "" "" "SOURCES;HEADERS;ATOMICS" ${ARGN})
  set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/bpf)
  file(MAKE_DIRECTORY ${out_dir})

  set(arch_dir ${CMAKE_CURRENT_SOURCE_DIR}/vmlinux/${THPTRACE_BPF_ARCH})
  set(objects)
  foreach(src IN LISTS ARG_SOURCES)
    get_filename_component(stem ${src} NAME_WE)
    set(obj ${out_dir}/${stem}.bpf.o)
    set(check ${CMAKE_CURRENT_SOURCE_DIR}/check_bpf_atomics.sh)
    if(src IN_LIST ARG_ATOMICS)
      set(check true)
    endif()
    add_custom_command(
      OUTPUT ${obj}
      COMMAND ${CLANG_EXECUTABLE} -g -O2 -target bpf -mcpu=v3 -D__TARGET_ARCH_${THPTRACE_BPF_ARCH}
              -Wall -Werror -I${arch_dir} -I${CMAKE_CURRENT_SOURCE_DIR}
              -c ${CMAKE_CURRENT_SOURCE_DIR}/${src} -o ${obj}.tmp
      COMMAND ${check} ${obj}.tmp
      COMMAND ${CMAKE_COMMAND} -E rename ${obj}.tmp ${obj}
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${src} ${ARG_HEADERS} ${arch_dir}/vmlinux.h
              ${CMAKE_CURRENT_SOURCE_DIR}/check_bpf_atomics.sh
      COMMENT "BPF ${src}"
      VERBATIM)
    list(APPEND objects ${obj})
  endforeach()

  set(linked ${out_dir}/${NAME}.bpf.o)
  set(skel ${out_dir}/${NAME}.skel.h)
  add_custom_command(
    OUTPUT ${linked} ${skel}
    COMMAND ${BPFTOOL_EXECUTABLE} gen object ${linked} ${objects}
    COMMAND ${BPFTOOL_EXECUTABLE} gen skeleton ${linked} name ${NAME} > ${skel}
    DEPENDS ${objects}
    COMMENT "BPF skeleton ${NAME}.skel.h"
    VERBATIM)
  add_custom_target(${NAME}_skel_gen DEPENDS ${skel})
  add_library(${NAME}_skel INTERFACE)
  add_dependencies(${NAME}_skel ${NAME}_skel_gen)
  target_include_directories(${NAME}_skel INTERFACE ${out_dir})
endfunction()
