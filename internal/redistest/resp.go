package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// This file holds a deliberately tiny RESP2 client used for the harness's own
// administration (readiness probes, CLUSTER and SENTINEL commands). It keeps
// the harness independent of go-redis behaviour (pools, retries, background
// goroutines): every call dials, sends one command with a deadline and closes.

const (
	// defaultCmdTimeout bounds an admin command when the context has no
	// (earlier) deadline.
	defaultCmdTimeout = 2 * time.Second
	// maxBulk guards against absurd lengths from a confused peer.
	maxBulk = 64 << 20
)

// respError is an error reply ("-ERR ...") from the server.
type respError string

func (e respError) Error() string { return string(e) }

// isRespError reports whether err is a server error reply whose text starts
// with prefix (for example "INPROG" or "ERR Unknown subcommand").
func isRespError(err error, prefix string) bool {
	var re respError
	return errors.As(err, &re) && strings.HasPrefix(string(re), prefix)
}

// command runs one command against addr and returns the decoded reply:
// string (simple or bulk), int64, []any, nil, or respError for an error
// element nested in an array. A top-level error reply is returned as a
// respError error.
func command(ctx context.Context, addr string, args ...string) (any, error) {
	deadline := time.Now().Add(defaultCmdTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	d := net.Dialer{Deadline: deadline}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// Abort blocked I/O as soon as ctx is cancelled, not just at its deadline.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	v, err := roundTrip(c, args)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %v", ctx.Err(), err)
	}
	return v, err
}

func roundTrip(c net.Conn, args []string) (any, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	v, err := readReply(bufio.NewReader(c))
	if err != nil {
		return nil, err
	}
	if re, ok := v.(respError); ok {
		return nil, re
	}
	return v, nil
}

// commandString runs a command whose reply is a (simple or bulk) string.
func commandString(ctx context.Context, addr string, args ...string) (string, error) {
	v, err := command(ctx, addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: unexpected reply %T to %s", addr, v, strings.Join(args, " "))
	}
	return s, nil
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("resp: malformed line %q", line)
	}
	line = line[:len(line)-2]
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return respError(line[1:]), nil
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n > maxBulk {
			return nil, fmt.Errorf("resp: bad bulk length %q", line)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n > maxBulk {
			return nil, fmt.Errorf("resp: bad array length %q", line)
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	}
	return nil, fmt.Errorf("resp: unexpected reply type %q", line)
}

// parseInfo parses INFO / CLUSTER INFO output into a field map.
func parseInfo(s string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// info runs INFO <section> (or CLUSTER INFO when section is "cluster-info").
func info(ctx context.Context, addr, section string) (map[string]string, error) {
	args := []string{"INFO", section}
	if section == "cluster-info" {
		args = []string{"CLUSTER", "INFO"}
	}
	s, err := commandString(ctx, addr, args...)
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

// flatMap converts a flat [k1 v1 k2 v2 ...] reply (SENTINEL MASTER and
// friends) into a map.
func flatMap(v any) map[string]string {
	arr, _ := v.([]any)
	m := make(map[string]string, len(arr)/2)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		switch val := arr[i+1].(type) {
		case string:
			m[k] = val
		case int64:
			m[k] = strconv.FormatInt(val, 10)
		}
	}
	return m
}
