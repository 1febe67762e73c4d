# Protocol Buffers and gRPC for the public API (proto/), and waav_proto_library() to generate
# C++ from .proto files into the build tree. Included from the top-level CMakeLists.txt, so the
# imported targets (protobuf::libprotobuf, gRPC::grpc++, gRPC::grpc++_reflection) are visible
# in every folder.
#
# Debian 12 ships protobuf 3.21 without a CMake package (CMake's FindProtobuf finds it) and
# gRPC 1.51 with one (gRPCConfig.cmake, which also provides gRPC::grpc_cpp_plugin). Where
# gRPC's CMake package is missing, pkg-config's grpc++ and a grpc_cpp_plugin on PATH stand in,
# under the same target names.

find_package(Protobuf REQUIRED)
if(NOT Protobuf_PROTOC_EXECUTABLE)
  message(FATAL_ERROR "protoc not found: install protobuf-compiler (Debian) or set "
                      "Protobuf_PROTOC_EXECUTABLE")
endif()

find_package(gRPC CONFIG QUIET)
if(TARGET gRPC::grpc++ AND TARGET gRPC::grpc_cpp_plugin)
  set(WAAV_GRPC_CPP_PLUGIN "$<TARGET_FILE:gRPC::grpc_cpp_plugin>")
  set(waav_grpc_how "CMake package ${gRPC_DIR}")
else()
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(WAAV_GRPCPP IMPORTED_TARGET grpc++)
  find_program(WAAV_GRPC_CPP_PLUGIN grpc_cpp_plugin)
  if(NOT WAAV_GRPCPP_FOUND OR NOT WAAV_GRPC_CPP_PLUGIN)
    message(FATAL_ERROR "gRPC C++ not found (neither gRPCConfig.cmake nor pkg-config grpc++ "
                        "with grpc_cpp_plugin): install libgrpc++-dev and protobuf-compiler-grpc")
  endif()
  if(NOT TARGET gRPC::grpc++)
    add_library(gRPC::grpc++ INTERFACE IMPORTED)
    target_link_libraries(gRPC::grpc++ INTERFACE PkgConfig::WAAV_GRPCPP)
  endif()
  find_library(WAAV_GRPCPP_REFLECTION_LIBRARY grpc++_reflection)
  if(WAAV_GRPCPP_REFLECTION_LIBRARY AND NOT TARGET gRPC::grpc++_reflection)
    add_library(gRPC::grpc++_reflection UNKNOWN IMPORTED)
    set_target_properties(gRPC::grpc++_reflection PROPERTIES
      IMPORTED_LOCATION "${WAAV_GRPCPP_REFLECTION_LIBRARY}"
      INTERFACE_LINK_LIBRARIES gRPC::grpc++)
  endif()
  set(waav_grpc_how "pkg-config grpc++ ${WAAV_GRPCPP_VERSION}")
endif()
message(STATUS "waav: protobuf ${Protobuf_VERSION} (${Protobuf_PROTOC_EXECUTABLE}), "
               "gRPC from ${waav_grpc_how}")

# waav_proto_library(NAME ROOT dir PROTOS a.proto b.proto [GRPC] [DEPS lib ...])
#
# A static library NAME of the C++ generated from PROTOS (paths relative to ROOT, which is the
# import root: `import "waav/v1/audio.proto"` resolves against it). With GRPC, the service stubs
# (*.grpc.pb.h) too. DEPS: other waav_proto_library targets whose protos these import.
# The generated files go to the current build folder under the same relative paths, and that
# folder is on the library's public include path, so code includes "waav/v1/recognizer.pb.h".
# It is a SYSTEM include: warnings in generated headers are the generator's, not ours.
# Also written: NAME.protoset, a FileDescriptorSet of PROTOS with their imports and comments
# (for `grpcurl -protoset`, and for tests that check the API's documentation); its path is the
# target's WAAV_PROTOSET property.
function(waav_proto_library name)
  cmake_parse_arguments(P "GRPC" "ROOT" "PROTOS;DEPS" ${ARGN})
  if(NOT P_ROOT OR NOT P_PROTOS)
    message(FATAL_ERROR "waav_proto_library(${name}): ROOT and PROTOS are required")
  endif()
  set(out_dir "${CMAKE_CURRENT_BINARY_DIR}")
  set(import_paths "--proto_path=${P_ROOT}")
  foreach(dep IN LISTS P_DEPS)
    get_target_property(dep_root ${dep} WAAV_PROTO_ROOT)
    list(APPEND import_paths "--proto_path=${dep_root}")
  endforeach()

  set(sources)
  set(proto_files)
  foreach(proto IN LISTS P_PROTOS)
    string(REGEX REPLACE "\\.proto$" "" stem "${proto}")
    list(APPEND sources "${out_dir}/${stem}.pb.cc" "${out_dir}/${stem}.pb.h")
    if(P_GRPC)
      list(APPEND sources "${out_dir}/${stem}.grpc.pb.cc" "${out_dir}/${stem}.grpc.pb.h")
    endif()
    list(APPEND proto_files "${P_ROOT}/${proto}")
  endforeach()

  set(grpc_args)
  set(grpc_depends)
  if(P_GRPC)
    set(grpc_args "--grpc_out=${out_dir}" "--plugin=protoc-gen-grpc=${WAAV_GRPC_CPP_PLUGIN}")
    if(TARGET gRPC::grpc_cpp_plugin)
      set(grpc_depends gRPC::grpc_cpp_plugin)
    endif()
  endif()
  # The imported protos of DEPS are inputs too: a change there regenerates these files.
  set(dep_protos)
  foreach(dep IN LISTS P_DEPS)
    get_target_property(files ${dep} WAAV_PROTO_FILES)
    list(APPEND dep_protos ${files})
  endforeach()

  set(protoset "${out_dir}/${name}.protoset")
  string(JOIN " " protos_text ${P_PROTOS})
  add_custom_command(
    OUTPUT ${sources} "${protoset}"
    COMMAND "${Protobuf_PROTOC_EXECUTABLE}" ${import_paths} "--cpp_out=${out_dir}" ${grpc_args}
            "--descriptor_set_out=${protoset}" --include_imports --include_source_info
            ${proto_files}
    DEPENDS ${proto_files} ${dep_protos} "${Protobuf_PROTOC_EXECUTABLE}" ${grpc_depends}
    COMMENT "Generating C++ from ${protos_text}"
    VERBATIM)

  add_library(${name} STATIC ${sources})
  target_include_directories(${name} SYSTEM PUBLIC "${out_dir}")
  target_link_libraries(${name} PUBLIC waav_options protobuf::libprotobuf ${P_DEPS})
  if(P_GRPC)
    target_link_libraries(${name} PUBLIC gRPC::grpc++)
  endif()
  set_target_properties(${name} PROPERTIES
    WAAV_PROTO_ROOT "${P_ROOT}"
    WAAV_PROTO_FILES "${proto_files}"
    WAAV_PROTOSET "${protoset}")
endfunction()
