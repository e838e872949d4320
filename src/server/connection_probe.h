// server/connection_probe.h — has the HTTP client gone away? (Linux only)
//
// cpp-httplib 0.11 gives a handler no way to learn that its client closed the socket, so a
// long generation would run to the end for nobody. find_socket_fd() recovers the request's
// socket by scanning /proc/self/fd for the socket whose local port is req.local_port and
// whose peer is req.remote_addr:req.remote_port (IPv4, IPv6 and v4-mapped v6). It costs
// one readlink + getsockname/getpeername per open fd, so call it once per request; the fd
// stays valid while the handler (and its content provider) runs, because httplib closes the
// socket only after the response is written. peer_closed() is one poll + one recv(MSG_PEEK).
#pragma once

#include <string>

namespace httplib { struct Request; }

namespace hs::server {

// The fd of the connection `req` came in on; -1 if none matches (or not on Linux).
int find_socket_fd(const httplib::Request& req);
// The same by address: the socket with local port `local_port` and peer `peer_addr:peer_port`.
int find_socket_fd(int local_port, const std::string& peer_addr, int peer_port);

// The listening socket bound to local port `port`; -1 if none (or not on Linux).
int find_listening_fd(int port);

// cpp-httplib 0.11 (Debian's shared library) listens with a backlog of 5, so a burst of more
// than ~6 simultaneous connects overflows the accept queue and some clients see their
// connection reset. Calling listen() again on a listening socket only raises its backlog
// (Linux); this does that for the socket on `port` with SOMAXCONN. False if none was found.
bool deepen_listen_backlog(int port);

// True when the peer closed or reset the connection: recv(MSG_PEEK | MSG_DONTWAIT) returns 0
// (orderly close) or ECONNRESET, or poll reports POLLHUP/POLLERR/POLLNVAL. Pending unread
// bytes (a pipelined request) read as "still open". False for fd < 0. Never blocks.
bool peer_closed(int fd);

}  // namespace hs::server
