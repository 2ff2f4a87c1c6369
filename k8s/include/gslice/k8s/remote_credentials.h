// A remote-client node's TLS trust (CA) and token, handed to the containers of remote pods.
//
// The node holds one CA file and one token file (a Secret mounted into the device plugin).
// Each container of a remote pod gets its own copies in a folder of the host,
// <host_dir>/<pod uid>/<container index>/, which the plugin's Allocate mounts read-only into
// the container:
//   token    the token, mode 0400, owned by the uid the container runs as. The client
//            (remote/protocol/token.cc) refuses a token file that group or others may read,
//            so one shared copy cannot serve pods of different users: each gets its own.
//   ca.crt   the CA bundle, mode 0444 (public).
// Each file is written to a temporary name and renamed, so a container never reads half a
// token; because the folder (not the file) is mounted, a renamed-in copy is what a running
// container sees next. Copies are rewritten when the node's files change (a rotated Secret)
// and removed once their pod is gone.
#pragma once

#include <cstdint>
#include <set>
#include <string>

namespace gslice::k8s {

struct RemoteCredentials {
  std::string ca_file = {};     // PEM bundle; empty: the containers use the system's trusted roots
  std::string token_file = {};  // empty: none (tls:// GPU nodes cannot be served)
  std::string host_dir = {};    // where the per-container copies live on the host
};

// The names of the copies inside a container's folder.
inline constexpr const char* kRemoteCaName = "ca.crt";
inline constexpr const char* kRemoteTokenName = "token";

// Whether the node's files can be handed out: the token file passes the client's own checks
// (ReadTokenFile: a regular file, no group/other access, 16-1024 characters), the CA file is a
// readable PEM file, and host_dir exists or can be created. False with a message naming the
// file and what to do.
bool CheckRemoteCredentials(const RemoteCredentials& c, std::string* error);

// Writes (or refreshes) the copies for one container and returns its folder on the host; ""
// with *error when a source file fails CheckRemoteCredentials's rules or a copy cannot be
// written. REQUIRES: !c.token_file.empty(); the caller may chown files (root or CAP_CHOWN).
std::string WriteContainerCredentials(const RemoteCredentials& c, const std::string& pod_uid, size_t index,
                                      uint32_t owner, std::string* error);

// Removes the folders of pods whose UIDs are not in `live_pod_uids`, and refreshes the copies
// of the others from the node's current files (keeping each token copy's owner). Errors are
// returned as one message ("" when none); nothing stops at the first.
std::string TidyContainerCredentials(const RemoteCredentials& c, const std::set<std::string>& live_pod_uids);

}  // namespace gslice::k8s
