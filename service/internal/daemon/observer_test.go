package daemon

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOverridesAppliedMetric(t *testing.T) {
	m, err := newMetrics()
	require.NoError(t, err)
	o := &engineObserver{m: m}
	count := func(result string) float64 {
		mfs, err := m.reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "ratelimitd_overrides_applied_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				if l := s.GetLabel(); len(l) == 1 && l[0].GetValue() == result {
					return s.GetCounter().GetValue()
				}
			}
		}
		return -1
	}
	require.Zero(t, count("set"))
	require.Zero(t, count("error"))
	o.OverridesApplied(nil, 3, 1, nil)
	o.OverridesApplied(nil, 1, 0, errors.Join(errors.New("a"), errors.New("b")))
	o.OverridesApplied(nil, 0, 0, errors.New("c"))
	require.Equal(t, 4.0, count("set"))
	require.Equal(t, 1.0, count("cleared"))
	require.Equal(t, 3.0, count("error"))
}
