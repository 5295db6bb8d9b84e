// Whether the client of a request is still connected: a non-streamed completion polls it, so that a client
// that leaves cancels its choices instead of leaving them to run to max_tokens.
#pragma once

#include <httplib.h>

namespace minigpt::server {

// The socket a request came on, found by its two addresses among this process's descriptors (httplib 0.11
// gives a handler no socket; later versions have Request::is_connection_closed for this); -1 when none
// matches. The descriptor stays open while the handler runs: httplib closes it after the response.
int connection_socket(const httplib::Request& req);

// Whether the client closed (or reset) the connection: a peek that reads end-of-file or fails. Bytes waiting
// (a next request on a kept-alive connection) mean it is still there.
bool client_gone(int fd);

}  // namespace minigpt::server
