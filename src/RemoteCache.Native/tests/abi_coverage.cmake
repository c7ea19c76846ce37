# Runs remotecache-abi (ABI_TOOL) and checks that its JSON names everything of the public headers
# (every *.h in HEADER_DIR: remotecache.h, remotecache_admin.h) a binding mirrors: every
# `typedef struct NAME {`, every status of the rc_status enum and every numeric #define. The tool
# checks that its tables list every field of the structs it knows; this checks that it knows every
# struct, status and define, so one added to a header but not to the tool fails here.
#   cmake -DABI_TOOL=... -DHEADER_DIR=... -P abi_coverage.cmake
execute_process(COMMAND ${ABI_TOOL} OUTPUT_VARIABLE dump ERROR_VARIABLE errors RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "remotecache-abi failed (${result}):\n${errors}")
endif()

file(GLOB headers ${HEADER_DIR}/*.h)
if(NOT headers)
  message(FATAL_ERROR "no headers in ${HEADER_DIR}")
endif()
set(header "")
foreach(path IN LISTS headers)
  file(READ ${path} text)
  string(APPEND header "${text}")
endforeach()
string(REGEX MATCHALL "typedef struct [a-z_0-9]+ {" structs "${header}")
string(REGEX MATCHALL "\n  RC_[A-Z_0-9]+ = -?[0-9]+" statuses "${header}")
string(REGEX MATCHALL "#define RC_[A-Z_0-9]+ +[0-9]" defines "${header}")
list(LENGTH structs struct_count)
list(LENGTH statuses status_count)
list(LENGTH defines define_count)
if(struct_count EQUAL 0 OR status_count EQUAL 0 OR define_count EQUAL 0)
  message(FATAL_ERROR "found ${struct_count} structs, ${status_count} statuses, ${define_count} defines in ${headers}: "
                      "the patterns of this script no longer match the header")
endif()

set(missing "")
foreach(item IN LISTS structs statuses defines)
  string(REGEX MATCH "RC_[A-Z_0-9]+|rc_[a-z_0-9]+" name "${item}")
  string(FIND "${dump}" "\"${name}\":" at)
  if(at EQUAL -1)
    list(APPEND missing ${name})
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "remotecache-abi does not report these names of ${headers}: ${missing}")
endif()
message(STATUS "remotecache-abi covers ${struct_count} structs, ${status_count} statuses and ${define_count} defines")
