package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
)

// HTTPRequest finds the very request behind its view, outside the
// middleware too. The suite's Accessor case covers KeyFunc in the
// middleware and the views that are not net/http's.
func TestHTTPRequestOfItsView(t *testing.T) {
	hr := httptest.NewRequest(http.MethodGet, "/", nil)
	got, ok := httplimit.HTTPRequest(httplimit.Request(hr))
	require.True(t, ok)
	require.Same(t, hr, got)
}
