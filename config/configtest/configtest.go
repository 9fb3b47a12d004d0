// Package configtest runs table tests of a service's settings reader: each
// case is an environment and either the variables its errors must name or a
// check of the settings read.
package configtest

import (
	"testing"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/testenv"
)

// Case is one environment and what reading it must give.
type Case[S any] struct {
	Name string
	Env  map[string]string
	// WantErr are the variables the error must name; empty means no error.
	WantErr []string
	// Check reports whether the settings read are right (cases without
	// WantErr).
	Check func(S) bool
}

// Run reads each case's environment with read, as parallel subtests.
func Run[S any](t *testing.T, read func(*config.Env) S, cases []Case[S]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			env := config.FromMap(tc.Env)
			s := read(env)
			err := env.Err()
			if len(tc.WantErr) > 0 {
				testenv.ErrorNames(t, err, tc.WantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.Check(s) {
				t.Errorf("got %+v", s)
			}
		})
	}
}
