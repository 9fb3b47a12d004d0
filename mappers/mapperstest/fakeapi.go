package mapperstest

// Pieces of the local fakes of provider APIs that outbound tests run
// against: scripted answers and the check of the error a client returns.

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/relaystation/relay/mappers"
)

// Answer returns a scripted answer: status, a JSON body and headers given as
// name, value pairs.
func Answer(status int, body string, hdr ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// Serve runs h on a local test server until the test ends and returns the
// server's URL.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Created answers 201 Created with v as the JSON body: a fake API's reply
// to a create.
func Created(w http.ResponseWriter, v any) {
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(v)
}

// Queue holds scripted answers a fake gives instead of its own, in order.
// The fake guards it with its own lock.
type Queue []func(http.ResponseWriter)

// Next answers w with the first queued answer, if any, and reports whether
// it did.
func (q *Queue) Next(w http.ResponseWriter) bool {
	if len(*q) == 0 {
		return false
	}
	f := (*q)[0]
	*q = (*q)[1:]
	f(w)
	return true
}

// CheckAPIError fails the test unless err is a *mappers.APIError with the
// status, permanence and retry delay given.
func CheckAPIError(t testing.TB, err error, status int, permanent bool, retry time.Duration) {
	t.Helper()
	var ae *mappers.APIError
	if !errors.As(err, &ae) || ae.Status != status || ae.Permanent() != permanent || ae.RetryDelay() != retry {
		t.Fatalf("got %v, want status %d permanent=%v retry=%s", err, status, permanent, retry)
	}
}

// APIErrorCase is a scripted failure of a provider's API and the
// *mappers.APIError a client must return for it.
type APIErrorCase struct {
	Name      string
	Target    string                    // what the client posts to (an issue, a work package); the fake knows only one
	Fail      func(http.ResponseWriter) // the fake's scripted answer; nil to post to a missing target
	Status    int
	Permanent bool
	Retry     time.Duration
}

// RunAPIErrorCases runs each case in a parallel subtest: post starts a fake
// with the case's failure queued (fail is nil or holds one answer), posts to
// target and returns the client's error, which CheckAPIError checks.
func RunAPIErrorCases(t *testing.T, cases []APIErrorCase, post func(t *testing.T, target string, fail Queue) error) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			var fail Queue
			if tc.Fail != nil {
				fail = Queue{tc.Fail}
			}
			CheckAPIError(t, post(t, tc.Target, fail), tc.Status, tc.Permanent, tc.Retry)
		})
	}
}
