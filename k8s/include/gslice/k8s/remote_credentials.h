// A remote-client node's TLS trust (CA) and tokens, handed to the containers of remote pods.
//
// The node holds one CA file and either one token file for every pod, or a folder of tokens,
// one per namespace, each named after its namespace (a Secret with one key per namespace,
// mounted into the device plugin): a GPU node's gslice-remoted then knows each namespace as a
// tenant of its own (its --tenants file maps each token to a user and project), and a token
// can be revoked for one namespace. A pod of a namespace without a token is refused at
// Allocate, never given another namespace's.
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
#include <map>
#include <string>

namespace gslice::k8s {

struct RemoteCredentials {
  std::string ca_file = {};     // PEM bundle; empty: the containers use the system's trusted roots
  std::string token_file = {};  // the token of every pod; empty: none, or token_dir's
  std::string token_dir = {};   // or the token of each namespace, <token_dir>/<namespace>
  std::string host_dir = {};    // where the per-container copies live on the host
  // Whether there are tokens to hand out (else tls:// GPU nodes cannot be served).
  bool has_tokens() const { return !token_file.empty() || !token_dir.empty(); }
};

// The token file of a pod of namespace `ns`: token_file, or token_dir/ns where ns is a
// Kubernetes namespace name (a DNS label: lower-case letters, digits and '-', at most 63).
// "" with *error saying what is missing and what to do.
std::string TokenFileFor(const RemoteCredentials& c, const std::string& ns, std::string* error);

// The names of the copies inside a container's folder.
inline constexpr const char* kRemoteCaName = "ca.crt";
inline constexpr const char* kRemoteTokenName = "token";

// Whether the node's files can be handed out: at most one of token_file and token_dir; the
// token file passes the client's own checks (ReadTokenFile: a regular file, no group/other
// access, 16-1024 characters), or token_dir is a folder; the CA file is a readable PEM file;
// and host_dir exists or can be created. False with a message naming the file and what to do.
// (A namespace's token in token_dir is checked when a pod of it is allocated.)
bool CheckRemoteCredentials(const RemoteCredentials& c, std::string* error);

// Writes (or refreshes) the copies for one container of a pod of namespace pod_namespace and
// returns its folder on the host; "" with *error when the pod's token (TokenFileFor) or the
// CA fails CheckRemoteCredentials's rules or a copy cannot be written.
// REQUIRES: c.has_tokens(); the caller may chown files (root or CAP_CHOWN).
std::string WriteContainerCredentials(const RemoteCredentials& c, const std::string& pod_uid,
                                      const std::string& pod_namespace, size_t index, uint32_t owner,
                                      std::string* error);

// Removes the folders of pods whose UIDs are not keys of `live_pods` (pod UID -> namespace),
// and refreshes the copies of the others from the node's current files (keeping each token
// copy's owner; a namespace whose token was removed loses its pods' copies). Errors are
// returned as one message ("" when none); nothing stops at the first.
std::string TidyContainerCredentials(const RemoteCredentials& c, const std::map<std::string, std::string>& live_pods);

}  // namespace gslice::k8s
