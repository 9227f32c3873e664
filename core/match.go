package core

// Match says which requests a policy applies to. The zero value matches
// every request.
type Match struct {
	// Methods, if any, are the HTTP methods (or "POST" for gRPC) matched,
	// case-insensitively.
	Methods []string
	// Routes, if any, are path patterns matched against the request path:
	// segments are literal, "*" or ":name" or "{name}" (any one segment), and
	// a final "**" (any rest, including nothing). "/api/**" matches "/api"
	// and everything below it. gRPC paths are "/pkg.Service/Method".
	Routes []string
}
