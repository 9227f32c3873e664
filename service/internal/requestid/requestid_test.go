package requestid_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/requestid"
)

func TestNewIsValidAndFresh(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := requestid.New()
		require.Len(t, id, 32)
		require.True(t, requestid.Valid(id))
		require.False(t, seen[id], "repeated id %s", id)
		seen[id] = true
	}
}

func TestValid(t *testing.T) {
	for id, want := range map[string]bool{
		"":                                      false,
		"a":                                     true,
		"req-1_2.3:4":                           true,
		strings.Repeat("x", requestid.MaxLen):   true,
		strings.Repeat("x", requestid.MaxLen+1): false,
		"has space":                             false,
		"new\nline":                             false,
		"ünicode":                               false,
		"semi;colon":                            false,
	} {
		require.Equal(t, want, requestid.Valid(id), "%q", id)
	}
}

func ExampleValid() {
	fmt.Println(requestid.Valid("deploy-42:retry.1"), requestid.Valid("no spaces allowed"))
	// Output: true false
}
