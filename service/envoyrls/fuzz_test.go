package envoyrls_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/service/envoyrls"
)

// FuzzJSON: any body POSTed to /json is answered 200, 429 or a 4xx
// problem, with a JSON body, never a panic nor a 5xx.
func FuzzJSON(f *testing.F) {
	e := memoryEngine(f, enRules(nil))
	h := envoyrls.New(e).JSONHandler()
	f.Add(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1"}]}]}`)
	f.Add(`{"domain":"edge","hits_addend":3,"descriptors":[{"entries":[{"key":"path","value":"/api"},{"key":"user","value":"u"}],"hitsAddend":"0"}]}`)
	f.Add(`{"domain":"edge","descriptors":[{"entries":[{"key":"category","value":"bulk"}],"isNegativeHits":true,"hits_addend":"2"}]}`)
	f.Add(`{"domain":"x","descriptors":[{"limit":{"requests_per_unit":1,"unit":"SECOND"}}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 || rec.Code != http.StatusOK && rec.Code != http.StatusTooManyRequests && rec.Code < 400 {
			t.Fatalf("%q: %d %s", body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%q: not JSON: %s", body, rec.Body)
		}
	})
}
