package adminui

import (
	"net/url"
	"testing"
)

// validForms returns a valid form of every POST route of the page (table),
// by pattern, with the CSRF token and the etag of page (a page of the
// orders rule of a session of s).
func validForms(t *testing.T, s *stack, page string) map[string]url.Values {
	t.Helper()
	tok := csrf(t, page)
	return map[string]url.Values{
		"POST /admin/login":      {"token": {s.write}},
		"POST /admin/logout":     {"csrf": {tok}},
		"POST /admin/rules/{id}": ruleForm(t, page),
		"POST /admin/new-rule": {"csrf": {tok}, "id": {"fresh"}, "name": {"Fresh"}, "dimension": {"ip"}, "endpoint_pattern": {"/fresh/**"},
			"tier": {""}, "limit": {"5"}, "window_seconds": {"60"}, "algorithm": {"gcra"}, "burst": {"0"}, "lease_seconds": {"0"}, "enabled": {"on"}},
		"POST /admin/rules/{id}/delete": {"csrf": {tok}, "etag": {ruleForm(t, page).Get("etag")}},
		"POST /admin/users/tier":        {"csrf": {tok}, "dimension": {"user"}, "id": {"u1"}, "tier": {"gold"}},
		"POST /admin/users/override": {"csrf": {tok}, "dimension": {"user"}, "id": {"u1"}, "rule_id": {"orders"}, "kind": {"block"},
			"ttl_seconds": {"3600"}},
		"POST /admin/users/override/clear": {"csrf": {tok}, "dimension": {"user"}, "id": {"u1"}, "rule_id": {"orders"}, "back": {"users"}},
	}
}
