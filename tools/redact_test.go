package tools

import (
	"strings"
	"testing"

	"github.com/relaystation/relay/secret"
)

func TestRedactor(t *testing.T) {
	t.Parallel()
	r := NewRedactor(secret.New("hunter2-secret"), secret.New("abc"), secret.Value{})
	tests := []struct {
		name, in, gone string
		changed        bool
	}{
		{"configured secret", "pw=hunter2-secret;", "hunter2-secret", true},
		{"short values are not secrets", "abc def", "", false},
		{"github classic", "token ghp_0123456789abcdefghijABCDEFGHIJ0123456789 ok", "ghp_0123456789", true},
		{"github fine-grained", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github_pat_11", true},
		{"slack bot", "xoxb-1234567890-0987654321-abcdefABCDEF", "xoxb-1234567890", true},
		{"slack app", "xapp-1-A0123456789-0123456789-abcdef", "xapp-1-A0123", true},
		{"aws key id", "key AKIAIOSFODNN7EXAMPLE end", "AKIAIOSFODNN7EXAMPLE", true},
		{"aws secret", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI", true},
		{"private key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "MIIEow", true},
		{"bearer", "Authorization: Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl", true},
		{"basic", "Authorization: basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA", true},
		{"plain text", "Echo: hello world", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, changed := r.String(tt.in)
			if changed != tt.changed {
				t.Errorf("changed: got %v, want %v (%q)", changed, tt.changed, got)
			}
			if tt.gone != "" && strings.Contains(got, tt.gone) {
				t.Errorf("got %q, still holds %q", got, tt.gone)
			}
			if tt.changed && !strings.Contains(got, Redacted) {
				t.Errorf("got %q, want %s in it", got, Redacted)
			}
			if !tt.changed && got != tt.in {
				t.Errorf("got %q, want it unchanged", got)
			}
		})
	}
	v, changed := r.Value(map[string]any{"a": []any{"x", map[string]any{"k": "hunter2-secret"}}, "n": 1.0})
	if !changed || strings.Contains(strings.Join([]string{v.(map[string]any)["a"].([]any)[1].(map[string]any)["k"].(string)}, ""), "hunter2") {
		t.Errorf("nested value not redacted: %v", v)
	}
}

func TestArgsHashIsCanonical(t *testing.T) {
	t.Parallel()
	a := ArgsHash(map[string]any{"b": 1, "a": map[string]any{"y": 2, "x": "s"}})
	b := ArgsHash(map[string]any{"a": map[string]any{"x": "s", "y": 2}, "b": 1})
	if a != b || len(a) != 64 {
		t.Errorf("got %s and %s, want equal hex SHA-256", a, b)
	}
	if ArgsHash(nil) != ArgsHash(map[string]any{}) {
		t.Error("nil and empty arguments hash differently")
	}
}

func FuzzRedact(f *testing.F) {
	f.Add("Bearer abcdefgh12345678", "s3cret-value")
	f.Add("ghp_0123456789abcdefghijABCDEFGHIJ0123456789", "")
	f.Add("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----", "x")
	f.Fuzz(func(t *testing.T, text, sec string) {
		r := NewRedactor(secret.New(sec))
		got, changed := r.String(text)
		if len(sec) >= minSecretLen && strings.Contains(got, sec) && !strings.Contains(Redacted, sec) {
			t.Fatalf("secret %q survived in %q", sec, got)
		}
		if !changed && got != text {
			t.Fatalf("unchanged reported but text differs")
		}
		again, _ := r.String(got)
		if tokenRE.MatchString(again) {
			t.Fatalf("token shape survived a second pass: %q", again)
		}
	})
}
