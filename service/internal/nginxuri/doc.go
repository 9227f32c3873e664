// Package nginxuri computes the path nginx matches its locations on from
// the request target as the client wrote it: nginx's $uri from its
// $request_uri, which is what nginx's auth_request setups send ratelimitd
// (proxy_set_header X-Original-URI $request_uri).
//
// It follows nginx 1.21.1 and later (ngx_http_parse_request_line and
// ngx_http_parse_complex_uri, unchanged in that part since), on systems
// other than Windows:
//
//   - the path ends at the first "?" (the query) or "#" (a fragment, which
//     nginx accepts and drops);
//   - every %XX is decoded, in either case; a decoded "/" or "." then acts
//     as a written one (it separates segments, it forms "." and ".."), while
//     a decoded "%", "#" and "?" are ordinary characters of the path; a
//     broken escape (% not followed by two hex digits) and %00 are refused;
//   - repeated slashes are merged (merge_slashes on, nginx's default); with
//     merge_slashes off they stay, and the empty segment between two of
//     them is a segment like any other ("/a//../b" is "/a/b", not "/b");
//   - "." segments are removed and ".." removes the segment before it, a
//     final "." or ".." leaving the slash; a ".." above the root is
//     refused;
//   - a space or a control character is refused (nginx 1.21.1 and later
//     refuse them in a request line, and $request_uri cannot hold one);
//   - a target of the absolute form arrives without its scheme and host
//     ($request_uri holds only the path and query), and one with no path
//     ("?x", from "GET http://host?x") is the path "/".
//
// Nothing else changes: case, ";", "+", "\" and bytes above 0x7f (raw or
// decoded, UTF-8 or not) stay as they are. Where nginx refuses a target
// (400), Path refuses it too, so that no caller decides on a form nginx
// would not have routed where it did. Path is a pure function, safe for
// concurrent use.
package nginxuri
