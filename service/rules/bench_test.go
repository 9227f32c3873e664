package rules_test

import (
	"testing"

	"github.com/sluicehq/sluice/service/rules"
)

func BenchmarkMatch(b *testing.B) {
	s, err := rules.Parse("r.yaml", []byte(nativeFile))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(s.Match("", "user", "/api/v1/orders/42")) != 3 {
			b.Fatal("no match")
		}
	}
}

func BenchmarkMatchDescriptor(b *testing.B) {
	s, err := rules.Parse("m.yaml", []byte(envoyMessaging))
	if err != nil {
		b.Fatal(err)
	}
	entries := e("message_type", "marketing", "to_number", "2061111111")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := s.MatchDescriptor("messaging", entries); !ok {
			b.Fatal("no match")
		}
	}
}
