package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/service/ratelimitv1"
)

func TestFormatCheck(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	r := &ratelimitv1.CheckResponse{
		Allowed: false, Current: 10, Limit: 10, Remaining: 0, Rule: "api-per-user",
		State: ratelimitv1.State_STATE_THROTTLED, ResetAt: timestamppb.New(at), RetryAfter: durationpb.New(1500 * time.Millisecond),
	}
	require.Equal(t, "denied   rule=api-per-user  used=10/10  remaining=0  reset_at=2026-11-24T03:00:00Z  retry_after=1.500s", formatCheck(r, false))
	require.JSONEq(t, `{"allowed":false,"state":"throttled","rule":"api-per-user","current":10,"limit":10,"remaining":0,
		"reset_at":"2026-11-24T03:00:00Z","retry_after_seconds":1.5}`, formatCheck(r, true))
	r = &ratelimitv1.CheckResponse{Allowed: true, Current: 9, Limit: 10, Remaining: 1, Rule: "x", State: ratelimitv1.State_STATE_WARNING}
	require.Equal(t, "warning  rule=x  used=9/10  remaining=1", formatCheck(r, false))
	r = &ratelimitv1.CheckResponse{Allowed: true}
	require.Equal(t, "allowed  rule=(no rule applies)  used=0/0  remaining=0", formatCheck(r, false))
	r = &ratelimitv1.CheckResponse{Allowed: false, Rule: "x", RetryNever: true}
	require.Contains(t, formatCheck(r, false), "retry_after=never")
	// A failure mode's answer says so, and states no limit it did not apply.
	r = &ratelimitv1.CheckResponse{Allowed: true, Rule: "x", Degraded: ratelimitv1.Degraded_DEGRADED_FAIL_OPEN}
	require.Equal(t, "allowed  rule=x  limit=0  degraded=fail_open", formatCheck(r, false))
	require.JSONEq(t, `{"allowed":true,"state":"unspecified","rule":"x","current":0,"limit":0,"remaining":0,"degraded":"fail_open"}`, formatCheck(r, true))
	r = &ratelimitv1.CheckResponse{Allowed: true, Rule: "x", Limit: 5, Remaining: 4, Current: 1, Degraded: ratelimitv1.Degraded_DEGRADED_FALLBACK}
	require.Equal(t, "allowed  rule=x  used=1/5  remaining=4  degraded=fallback", formatCheck(r, false))
}

func TestCheckUsageErrors(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"RATELIMITD_GRPC_ADDR": "127.0.0.1:1"})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--identifier: required"},
		{[]string{"--identifier", "a", "--cost", "-1"}, "--cost"},
		{[]string{"--identifier", "a", "-n", "0"}, "--n"},
		{[]string{"--identifier", "a", "--peek", "--reset"}, "--peek, --reset"},
		{[]string{"--identifier", "a", "--http", "http://x", "--reset"}, "--reset"},
		{[]string{"--identifier", "a", "extra"}, "unexpected argument"},
		{[]string{"--identifier", "a", "--http", "ftp://x"}, "--http"},
	} {
		var out, errOut bytes.Buffer
		code := checkCmd(context.Background(), tc.args, &out, &errOut, env)
		require.Equal(t, 2, code, tc.args)
		require.Contains(t, errOut.String(), tc.want, tc.args)
	}
	// The check client's variables are RATELIMITD_CHECK_*: a server's
	// RATELIMITD_GRPC_ADDR is not the client's --addr.
	var c checkConfig
	_, err := parseFlags(newCheckFlags(&c), nil, checkPrefix, envMap(map[string]string{
		"RATELIMITD_ADDR": "127.0.0.1:1", "RATELIMITD_CHECK_ADDR": "127.0.0.1:2", "RATELIMITD_CHECK_IDENTIFIER": "zoe",
	}))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:2", c.Addr)
	require.Equal(t, "zoe", c.Identifier)
	// A bad value names the variable it came from, and the help names the
	// variables the client reads.
	_, err = parseFlags(newCheckFlags(&c), nil, checkPrefix, envMap(map[string]string{"RATELIMITD_CHECK_COST": "lots"}))
	require.ErrorContains(t, err, "RATELIMITD_CHECK_COST")
	var help bytes.Buffer
	require.Equal(t, 0, checkCmd(context.Background(), []string{"-h"}, &help, &help, envMap(nil)))
	require.Contains(t, help.String(), "env RATELIMITD_CHECK_ADDR")
	require.NotContains(t, help.String(), "env RATELIMITD_ADDR")
}
