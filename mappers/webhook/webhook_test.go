package webhook_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/webhook"
)

// The test vector published by the Standard Webhooks specification
// (standard-webhooks/standard-webhooks, libraries' shared tests).
const (
	specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTS     = 1614265330
	specBody   = `{"test": 2432232314}`
	specSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func mustSecret(t testing.TB, s string) webhook.Secret {
	t.Helper()
	sec, err := webhook.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret(%q): %v", s, err)
	}
	return sec
}

func TestSpecVector(t *testing.T) {
	t.Parallel()
	s := mustSecret(t, specSecret)
	if got := s.Sign(specID, time.Unix(specTS, 0), []byte(specBody)); got != specSig {
		t.Fatalf("got signature %q, want the specification's %q", got, specSig)
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, specID)
	h.Set(webhook.HeaderTimestamp, fmt.Sprint(specTS))
	h.Set(webhook.HeaderSignature, "v1,bm9wZQ== "+specSig) // a rotated-out signature first
	v := &webhook.Verifier{Secrets: []webhook.Secret{s}, Now: func() time.Time { return time.Unix(specTS+10, 0) }}
	if err := v.Verify(h, []byte(specBody)); err != nil {
		t.Fatalf("got %v verifying the specification's vector, want nil", err)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	s := mustSecret(t, specSecret)
	other := mustSecret(t, webhook.GenerateSecret())
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"type":"relay.message","data":{}}`)
	signed := func(mod func(h http.Header)) http.Header {
		h := http.Header{}
		s.SetHeaders(h, "msg_1", now, body)
		if mod != nil {
			mod(h)
		}
		return h
	}
	cases := []struct {
		name    string
		h       http.Header
		body    []byte
		secrets []webhook.Secret
		want    error
	}{
		{"valid", signed(nil), body, []webhook.Secret{s}, nil},
		{"rotation: second secret", signed(nil), body, []webhook.Secret{other, s}, nil},
		{"wrong secret", signed(nil), body, []webhook.Secret{other}, webhook.ErrSignature},
		{"body changed", signed(nil), []byte(`{"type":"relay.message","data":{"x":1}}`), []webhook.Secret{s}, webhook.ErrSignature},
		{"id changed", signed(func(h http.Header) { h.Set(webhook.HeaderID, "msg_2") }), body, []webhook.Secret{s}, webhook.ErrSignature},
		{"old timestamp", signed(func(h http.Header) { h.Set(webhook.HeaderTimestamp, fmt.Sprint(now.Add(-6*time.Minute).Unix())) }), body, []webhook.Secret{s}, webhook.ErrTimestamp},
		{"future timestamp", signed(func(h http.Header) { h.Set(webhook.HeaderTimestamp, fmt.Sprint(now.Add(6*time.Minute).Unix())) }), body, []webhook.Secret{s}, webhook.ErrTimestamp},
		{"timestamp not a number", signed(func(h http.Header) { h.Set(webhook.HeaderTimestamp, "soon") }), body, []webhook.Secret{s}, webhook.ErrTimestamp},
		{"no signature", signed(func(h http.Header) { h.Del(webhook.HeaderSignature) }), body, []webhook.Secret{s}, webhook.ErrMissingHeaders},
		{"v2 only", signed(func(h http.Header) {
			h.Set(webhook.HeaderSignature, "v2,"+strings.TrimPrefix(h.Get(webhook.HeaderSignature), "v1,"))
		}), body, []webhook.Secret{s}, webhook.ErrSignature},
		{"garbage signature", signed(func(h http.Header) { h.Set(webhook.HeaderSignature, "v1,@@@ v1") }), body, []webhook.Secret{s}, webhook.ErrSignature},
		{"no secrets", signed(nil), body, nil, webhook.ErrSignature},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := &webhook.Verifier{Secrets: tc.secrets, Now: func() time.Time { return now }}
			err := v.Verify(tc.h, tc.body)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in string
		ok bool
	}{
		{specSecret, true},
		{strings.TrimPrefix(specSecret, "whsec_"), true},
		{webhook.GenerateSecret(), true},
		{"whsec_short", false},
		{"whsec_not base64!", false},
		{"", false},
	}
	for _, tc := range cases {
		_, err := webhook.ParseSecret(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseSecret(%q): got %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}

func TestSecretNeverPrinted(t *testing.T) {
	t.Parallel()
	s := mustSecret(t, specSecret)
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("cfg", "secret", s)
	out := b.String() + fmt.Sprintf("%v %s %+v", s, s, s)
	if strings.Contains(out, "MfKQ9r8") || !strings.Contains(out, "REDACTED") {
		t.Fatalf("got %q, want REDACTED and no key", out)
	}
}

// receiver is a webhook endpoint that verifies what it receives and answers
// with the scripted statuses in order (then 204).
type receiver struct {
	mu       sync.Mutex
	v        *webhook.Verifier
	script   []func(w http.ResponseWriter)
	received []string // webhook-id of every verified request
	errs     []error
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err := rc.v.Verify(r.Header, body); err != nil {
		rc.errs = append(rc.errs, err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	rc.received = append(rc.received, r.Header.Get(webhook.HeaderID))
	if len(rc.script) > 0 {
		f := rc.script[0]
		rc.script = rc.script[1:]
		f(w)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func status(code int, hdr ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, http.StatusText(code))
	}
}

func TestSenderAgainstVerifier(t *testing.T) {
	t.Parallel()
	sec := mustSecret(t, webhook.GenerateSecret())
	cases := []struct {
		name       string
		script     []func(http.ResponseWriter)
		secret     webhook.Secret
		wantErr    bool
		permanent  bool
		retryAfter time.Duration
	}{
		{"delivered", nil, sec, false, false, 0},
		{"rate limited", []func(http.ResponseWriter){status(429, "Retry-After", "7")}, sec, true, false, 7 * time.Second},
		{"server error", []func(http.ResponseWriter){status(503)}, sec, true, false, 0},
		{"gone", []func(http.ResponseWriter){status(410)}, sec, true, true, 0},
		{"redirect not followed", []func(http.ResponseWriter){status(302, "Location", "http://127.0.0.1:1/")}, sec, true, true, 0},
		{"wrong secret refused by receiver", nil, mustSecret(t, webhook.GenerateSecret()), true, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := &receiver{v: &webhook.Verifier{Secrets: []webhook.Secret{sec}}, script: tc.script}
			url := mapperstest.Serve(t, rc)
			s, err := webhook.NewSender(webhook.SenderConfig{Secret: tc.secret})
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Send(t.Context(), url+"/hook", "out:123", []byte(`{"type":"relay.message"}`))
			if (err != nil) != tc.wantErr {
				t.Fatalf("got %v, want error=%v", err, tc.wantErr)
			}
			if err == nil {
				rc.mu.Lock()
				defer rc.mu.Unlock()
				if len(rc.received) != 1 || rc.received[0] != "out:123" {
					t.Fatalf("got received ids %v, want [out:123]", rc.received)
				}
				return
			}
			var se *webhook.SendError
			if !errors.As(err, &se) {
				t.Fatalf("got %T, want *webhook.SendError", err)
			}
			if se.Permanent() != tc.permanent || se.RetryDelay() != tc.retryAfter {
				t.Fatalf("got permanent=%v retry=%s, want %v %s (%v)", se.Permanent(), se.RetryDelay(), tc.permanent, tc.retryAfter, err)
			}
		})
	}
}

func TestSenderNetworkErrorIsTransient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	s, err := webhook.NewSender(webhook.SenderConfig{Secret: mustSecret(t, webhook.GenerateSecret())})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = s.Send(ctx, url, "id", []byte(`{}`))
	var se *webhook.SendError
	if !errors.As(err, &se) || se.Permanent() {
		t.Fatalf("got %v, want a transient *SendError", err)
	}
	if _, err := s.Send(ctx, "ftp://example.com/x", "id", nil); !errors.As(err, &se) || !se.Permanent() {
		t.Fatalf("got %v for an ftp URL, want a permanent *SendError", err)
	}
	if _, err := webhook.NewSender(webhook.SenderConfig{}); !errors.Is(err, webhook.ErrNoSecret) {
		t.Fatalf("got %v without a secret, want ErrNoSecret", err)
	}
}

// FuzzVerify: Verify never panics and never accepts a signature made with
// another key or over another body.
func FuzzVerify(f *testing.F) {
	f.Add(specID, "1614265330", specSig, []byte(specBody))
	f.Add("", "", "", []byte{})
	f.Add("id", "x", "v1,,,, v1", []byte("{"))
	s, _ := webhook.ParseSecret(specSecret)
	v := &webhook.Verifier{Secrets: []webhook.Secret{s}, Now: func() time.Time { return time.Unix(specTS, 0) }}
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(webhook.HeaderID, id)
		h.Set(webhook.HeaderTimestamp, ts)
		h.Set(webhook.HeaderSignature, sig)
		err := v.Verify(h, body)
		if err != nil {
			return
		}
		// Accepted: one of the v1 signatures must decode to the real MAC.
		tsN, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil || strconv.FormatInt(tsN, 10) != ts {
			return // non-canonical timestamps are signed over their raw text; covered by TestVerify
		}
		want, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(s.Sign(id, time.Unix(tsN, 0), body), "v1,"))
		for _, f := range strings.Fields(sig) {
			if b64, ok := strings.CutPrefix(f, "v1,"); ok {
				if got, err := base64.StdEncoding.DecodeString(b64); err == nil && bytes.Equal(got, want) {
					return
				}
			}
		}
		t.Fatalf("accepted id=%q ts=%q sig=%q without the real signature", id, ts, sig)
	})
}

func ExampleSecret_Sign() {
	s, _ := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	fmt.Println(s.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`)))
	// Output: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
}
