// Whether the client of a request is still connected: its socket found among this process's descriptors,
// and peeked at without reading.
#include "server/client_connection.h"

#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace minigpt::server {

namespace {

// A peer's address as text, as httplib writes Request::remote_addr.
std::string numeric_host(const sockaddr_storage& a, socklen_t len) {
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, nullptr, 0,
                    NI_NUMERICHOST) != 0) {
    return "";
  }
  return host;
}

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

}  // namespace

int connection_socket(const httplib::Request& req) {
  if (req.local_port <= 0 || req.remote_port <= 0) return -1;  // not from a TCP connection (a test's Request)
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = e.path().filename().string();
    char* end = nullptr;
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || *end != '\0' || fd < 0 || fd > INT32_MAX) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (::getsockname(int(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;  // not a socket
    if (port_of(local) != req.local_port) continue;
    if (::getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;  // the listener
    if (port_of(peer) != req.remote_port || numeric_host(peer, pl) != req.remote_addr) continue;
    return int(fd);
  }
  return -1;
}

bool client_gone(int fd) {
  if (fd < 0) return false;
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace minigpt::server
