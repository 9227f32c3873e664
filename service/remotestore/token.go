package remotestore

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// TokenCredentials returns per-RPC credentials sending secret (a token of
// `ratelimitd token create NAME --scope write`) as `authorization: Bearer
// SECRET` metadata, which a ratelimitd started with --grpc-auth=admin asks
// of the store API and ResetLimit. They require transport security: over a
// connection without TLS a call fails on the client, UNAUTHENTICATED,
// and the secret is never sent. Use InsecureTokenCredentials to send it
// in plaintext on purpose.
//
// Pass them to any client of ratelimitd with grpc.WithPerRPCCredentials or
// grpc.PerRPCCredentials; a Store takes them with WithToken.
func TokenCredentials(secret string) credentials.PerRPCCredentials {
	return tokenCreds{header: "Bearer " + secret, secure: true}
}

// InsecureTokenCredentials is TokenCredentials that also send the secret
// over a connection without TLS, where anyone on the path can read it:
// only for a loopback connection or a private link you trust (a sidecar, a
// pod's own network namespace).
func InsecureTokenCredentials(secret string) credentials.PerRPCCredentials {
	return tokenCreds{header: "Bearer " + secret}
}

// WithToken sends secret with every RPC of the Store
// (TokenCredentials): the connection must use TLS.
func WithToken(secret string) Option {
	return WithCallOptions(grpc.PerRPCCredentials(TokenCredentials(secret)))
}

// WithInsecureToken sends secret with every RPC of the Store, with or
// without TLS (InsecureTokenCredentials): only on a loopback or trusted
// private connection.
func WithInsecureToken(secret string) Option {
	return WithCallOptions(grpc.PerRPCCredentials(InsecureTokenCredentials(secret)))
}

// tokenCreds sends one bearer token.
type tokenCreds struct {
	header string
	secure bool
}

// GetRequestMetadata returns the authorization metadata.
func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": t.header}, nil
}

// RequireTransportSecurity reports whether the token is only sent over TLS.
func (t tokenCreds) RequireTransportSecurity() bool { return t.secure }

// String never shows the secret.
func (t tokenCreds) String() string { return "remotestore.tokenCredentials(secret hidden)" }
