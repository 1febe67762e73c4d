// The build's identity, from CMake: the project version and the git revision at configure time.
#pragma once

#ifndef WAAV_VERSION
#define WAAV_VERSION "0.0.0"
#endif
#ifndef WAAV_REVISION
#define WAAV_REVISION "unknown"
#endif

namespace waav::server {

inline constexpr char kVersion[] = WAAV_VERSION;
inline constexpr char kRevision[] = WAAV_REVISION;

}  // namespace waav::server
