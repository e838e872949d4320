// server/connection_probe.cpp — see connection_probe.h. Linux: /proc/self/fd, poll, recv.
#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <httplib.h>

namespace hs::server {
namespace {

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// The numeric host as httplib writes remote_addr (getnameinfo NI_NUMERICHOST).
std::string host_of(const sockaddr_storage& a, socklen_t len) {
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0)
    return {};
  return host;
}

// "::ffff:1.2.3.4" and "1.2.3.4" name the same IPv4 peer.
std::string_view strip_v4_mapped(std::string_view s) {
  constexpr std::string_view kPrefix = "::ffff:";
  if (s.size() > kPrefix.size() && s.substr(0, kPrefix.size()) == kPrefix && s.find('.') != std::string_view::npos)
    return s.substr(kPrefix.size());
  return s;
}

bool same_host(std::string_view a, std::string_view b) { return strip_v4_mapped(a) == strip_v4_mapped(b); }

// Calls fn(fd) for every socket among this process's open fds until it returns true; returns
// that fd, or -1.
template <typename F>
int find_socket(F&& fn) {
#ifdef __linux__
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  const int dir_fd = dirfd(dir);
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dir_fd) continue;
    char link[64];
    const ssize_t n = readlinkat(dir_fd, e->d_name, link, sizeof(link) - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    if (std::strncmp(link, "socket:", 7) != 0) continue;
    if (fn(static_cast<int>(fd))) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
#else
  (void)fn;
  return -1;
#endif
}

}  // namespace

int find_socket_fd(const httplib::Request& req) { return find_socket_fd(req.local_port, req.remote_addr, req.remote_port); }

int find_socket_fd(int local_port, const std::string& peer_addr, int peer_port) {
  if (local_port <= 0 || peer_port <= 0) return -1;
  return find_socket([&](int fd) {
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
    if (local.ss_family != AF_INET && local.ss_family != AF_INET6) return false;
    if (port_of(local) != local_port) return false;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;  // listener
    return port_of(peer) == peer_port && same_host(host_of(peer, peer_len), peer_addr);
  });
}

int find_listening_fd(int port) {
  if (port <= 0) return -1;
  return find_socket([&](int fd) {
    int accepting = 0;
    socklen_t opt_len = sizeof(accepting);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &opt_len) != 0 || !accepting) return false;
    sockaddr_storage local{};
    socklen_t local_len = sizeof(local);
    return getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0 && port_of(local) == port;
  });
}

bool deepen_listen_backlog(int port) {
  const int fd = find_listening_fd(port);
  return fd >= 0 && ::listen(fd, SOMAXCONN) == 0;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  const int r = poll(&p, 1, 0);
  if (r < 0) return false;  // EINTR and friends: try again next time
  if (p.revents & (POLLERR | POLLNVAL)) return true;
  if (p.revents & (POLLIN | POLLHUP)) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;  // orderly shutdown by the peer
    if (n < 0) return errno == ECONNRESET || errno == ENOTCONN || errno == EPIPE;
    return false;  // unread bytes: the peer is still there
  }
  return false;
}

}  // namespace hs::server
