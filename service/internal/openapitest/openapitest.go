// Package openapitest holds ratelimitd's HTTP tests to its OpenAPI
// document (package openapi): a Validator checks every request a test
// sends and every response it gets, through a server's handler (Handler)
// or a client's transport (Client, Transport), and fails the test on any
// that does not match. kin-openapi loads the document and validates it as
// OpenAPI 3.1, and its openapi3filter validates requests; responses are
// validated against the document's schemas compiled once with the JSON
// Schema 2020-12 validator kin-openapi uses for 3.1 (see responses.go).
//
// What matches:
//
//   - A request to a path outside /api/v1/ (the admin page, /metrics,
//     /healthz, Envoy's /json) is not described, and not checked.
//   - A request to a path and method the document describes is validated
//     against its operation (parameters, body, the bearer token's
//     presence). The test suites send invalid requests on purpose: one the
//     document refuses must be refused by the server too, with a 4xx. One
//     it accepts may still be refused (the servers check more than a
//     schema says: bytes, not characters; valid UTF-8; the rule set as a
//     whole).
//   - Every response to a described operation is validated against it: its
//     status must be one the operation lists, its Content-Type and body
//     must match that response's, and its declared headers must be there
//     and match.
//   - A path under /api/v1/ the document does not have must be answered
//     404, a method it does not list for a path 405 with Allow; either, when
//     it is problem+json, must be a problem the document describes.
//
// The check API ignores the body (and the Sluice-* headers) of a request
// whose query names the key, as documented: such a request's body is not
// validated.
package openapitest
