package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CommandCalls returns how many times the server c talks to has run the
// command name ("fcall", lower case), from INFO commandstats; 0 when it
// has not run it yet. It fails the test when the server cannot answer.
func CommandCalls(t testing.TB, c *redis.Client, name string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("redistest: INFO commandstats: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls=")
		if !ok {
			continue
		}
		end := strings.IndexByte(rest, ',')
		if end < 0 {
			end = len(rest)
		}
		n, err := strconv.Atoi(strings.TrimSpace(rest[:end]))
		if err != nil {
			t.Fatalf("redistest: commandstats of %s: %q: %v", name, line, err)
		}
		return n
	}
	return 0
}
