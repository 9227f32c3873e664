// Package openapi holds the OpenAPI 3.1 description of ratelimitd's HTTP
// APIs, the check API (package httpapi) and the admin REST API (package
// adminapi, behind adminauth), as one JSON document kept in this
// directory (openapi.json) and embedded in the binary. ratelimitd serves
// it at Path.
//
// The document is checked against the servers, not only written beside
// them: every request and response of the HTTP test suites of httpapi,
// adminapi and cmd/ratelimitd passes through a validator built from it
// (service/internal/openapitest), so a status, a header or a problem body
// the servers produce and the document does not describe fails a test;
// and the client in package apiclient is generated from it.
package openapi
