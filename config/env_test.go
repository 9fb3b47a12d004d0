package config_test

import (
	"testing"
	"time"

	"github.com/relaystation/relay/config"
)

func TestIntAndDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, value string
		read        func(e *config.Env) any
		want        any
		err         string
	}{
		{"int unset", "", func(e *config.Env) any { return e.Int("N", 7, 1, 10) }, 7, ""},
		{"int set", "10", func(e *config.Env) any { return e.Int("N", 7, 1, 10) }, 10, ""},
		{"int above", "11", func(e *config.Env) any { return e.Int("N", 7, 1, 10) }, 7, `N: "11" is not a whole number from 1 to 10`},
		{"int garbage", "x", func(e *config.Env) any { return e.Int("N", 7, 1, 10) }, 7, `N: "x" is not a whole number from 1 to 10`},
		{"duration unset", "", func(e *config.Env) any { return e.Duration("N", time.Second, time.Second, time.Minute) }, time.Second, ""},
		{"duration set", "90s", func(e *config.Env) any { return e.Duration("N", time.Second, time.Second, 2*time.Minute) }, 90 * time.Second, ""},
		{"duration below", "1ms", func(e *config.Env) any { return e.Duration("N", time.Second, time.Second, time.Minute) }, time.Second,
			`N: "1ms" is not a duration from 1s to 1m0s (like 30s or 5m)`},
		{"duration garbage", "5", func(e *config.Env) any { return e.Duration("N", time.Second, time.Second, time.Minute) }, time.Second,
			`N: "5" is not a duration from 1s to 1m0s (like 30s or 5m)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := config.FromMap(map[string]string{"N": tt.value})
			if got := tt.read(e); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			var got string
			if err := e.Err(); err != nil {
				got = err.Error()
			}
			if got != tt.err {
				t.Errorf("got error %q, want %q", got, tt.err)
			}
		})
	}
}

// A setting two services read is reported once when it is invalid; a
// different problem with it is still reported.
func TestProblemReportedOnce(t *testing.T) {
	t.Parallel()
	e := config.FromMap(map[string]string{"RELAY_REF_BASE_URL": "ftp://x", "N": "x"})
	e.URL("RELAY_REF_BASE_URL", "http", "https")
	e.URL("RELAY_REF_BASE_URL", "http", "https")
	e.Int("N", 1, 1, 10)
	e.Int("N", 1, 1, 5)
	want := `RELAY_REF_BASE_URL: scheme "ftp" is not one of http, https
N: "x" is not a whole number from 1 to 10
N: "x" is not a whole number from 1 to 5`
	if err := e.Err(); err == nil || err.Error() != want {
		t.Errorf("Err() = %v, want\n%s", err, want)
	}
}
