package approvals

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/secret"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestChunks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		n    int
		want []string
	}{
		{"empty", "", 10, []string{""}},
		{"fits", "hello", 10, []string{"hello"}},
		{"line break", "aaaa\nbbbbbbb", 8, []string{"aaaa\n", "bbbbbbb"}},
		{"hard cut", "abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"utf8", "ééééé", 5, []string{"éé", "éé", "é"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := chunks(tt.in, tt.n)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("chunks(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

func FuzzChunks(f *testing.F) {
	for _, s := range []string{"", "a\nb", strings.Repeat("é", 100), "line\n\n\nline", "\xff\xfe"} {
		f.Add(s, 7)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 4 || n > 10000 {
			return
		}
		parts := chunks(s, n)
		if strings.Join(parts, "") != s {
			t.Fatalf("chunks lost text")
		}
		for _, p := range parts {
			if len(p) > n {
				t.Fatalf("chunk of %d bytes, limit %d", len(p), n)
			}
			if utf8.ValidString(s) && !utf8.ValidString(p) {
				t.Fatalf("chunk %q splits a UTF-8 sequence", p)
			}
		}
	})
}

func TestKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"0b6f0b2c-3f58-4a43-9d4e-7bb0a0a0a0a0", "0b6f0b2c-3f58-4a43-9d4e-7bb0a0a0a0a0"},
		{"task_1.x", "task_1.x"},
	}
	for _, tt := range tests {
		if got := key(tt.in); got != tt.want {
			t.Errorf("key(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, bad := range []string{"", "a b", "x*y", ".lead", "trail.", "a>b", strings.Repeat("k", 200)} {
		if got := key(bad); !strings.HasPrefix(got, "h-") || !keyRE.MatchString(got) {
			t.Errorf("key(%q) = %q, want a hashed valid key", bad, got)
		}
	}
}

// FuzzInteraction feeds arbitrary meta.slack values to the interaction reader
// and the view readers: they must never panic, and an action they return is
// always one of the approval buttons with a task id.
func FuzzInteraction(f *testing.F) {
	f.Add(`{"type":"block_actions","user":"U1","actions":[{"action_id":"relay_approval_approve","value":"t1"}]}`, `{"text_0":{"text":"x"}}`)
	f.Add(`{"actions":[{"action_id":"relay_approval_edit","value":["a"]}],"view":{"state":{"reason":{"reason":5}}}}`, `{"reason":{"reason":" why "}}`)
	f.Add(`{"actions":null}`, `null`)
	f.Add(`[]`, `{"text_0":{"text":null},"text_1":{"text":"b"}}`)
	f.Fuzz(func(t *testing.T, meta, state string) {
		var v any
		if json.Unmarshal([]byte(meta), &v) != nil {
			return
		}
		e := envelope.New(envelope.ChannelSlack, envelope.RoleUser, "x")
		e.Meta.Set("slack", v)
		ia, err := readInteraction(e)
		if err == nil {
			action, task := ia.ourAction()
			if action != "" && (task == "" || (action != ActionApprove && action != ActionEdit && action != ActionReject)) {
				t.Fatalf("ourAction = %q, %q", action, task)
			}
		}
		var st map[string]map[string]any
		if json.Unmarshal([]byte(state), &st) == nil {
			_, _ = editedText(st)
			_ = reasonOf(st)
		}
		var md viewMetadata
		_ = json.Unmarshal([]byte(meta), &md)
		if len(md.encode()) > maxMetadata+len(md.TaskID)+64 {
			t.Fatalf("metadata too long")
		}
	})
}

func TestEditedText(t *testing.T) {
	t.Parallel()
	st := map[string]map[string]any{"text_0": {"text": "first "}, "text_1": {"text": nil}, "text_2": {"text": "third"}}
	if got, ok := editedText(st); !ok || got != "first third" {
		t.Errorf("editedText = %q, %v", got, ok)
	}
	if _, ok := editedText(map[string]map[string]any{"other": {}}); ok {
		t.Error("editedText found text in a foreign view")
	}
	if got := reasonOf(map[string]map[string]any{"reason": {"reason": "  off topic "}}); got != "off topic" {
		t.Errorf("reasonOf = %q", got)
	}
}

// TestMessageGolden pins the Block Kit of the approval message in each state.
func TestMessageGolden(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sugg := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, "x")
	sugg.Meta.Source = &envelope.Source{Event: "issues", Action: "opened", URL: "https://github.com/acme/widgets/issues/7"}
	sugg.Meta.Set("unknown_refs", []any{"doc-404"})
	raw, _ := json.Marshal(sugg)
	base := Record{
		TaskID: "task-1", Round: 1, Status: StatusPending, Text: "Upgrade to *v1.2* <!here>.",
		Suggestion: raw, Target: envelope.Target{Channel: "github", Owner: "acme", Repo: "widgets", Number: 7},
		SlackChannel: "C0APPROVE1", CreatedAt: at, ExpiresAt: at.Add(24 * time.Hour),
	}
	states := map[string]func(r *Record){
		"pending":  func(*Record) {},
		"edited":   func(r *Record) { r.EditedBy = "U0EDIT01" },
		"approved": func(r *Record) { r.Status, r.DecidedBy, r.DecidedAt = StatusApproved, "U0BOSS01", at.Add(time.Hour) },
		"rejected": func(r *Record) {
			r.Status, r.DecidedBy, r.DecidedAt, r.Reason = StatusRejected, "U0BOSS01", at.Add(time.Hour), "wrong <release>"
		},
		"expired": func(r *Record) { r.Status = StatusExpired },
		"round2":  func(r *Record) { r.Round = 2 },
	}
	for name, mod := range states {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := base
			mod(&r)
			blocks, fallback := message(&r, nil)
			got, err := json.MarshalIndent(map[string]any{"text": fallback, "blocks": blocks}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "message_"+name+".json")
			if *update {
				if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if strings.TrimSpace(string(want)) != strings.TrimSpace(string(got)) {
				t.Errorf("message %s differs from %s:\n%s", name, path, got)
			}
		})
	}
}

// A decision made in the operator console names the operator as such and
// is never rendered as a Slack user mention.
func TestConsoleDeciderIsNotASlackUser(t *testing.T) {
	t.Parallel()
	for _, by := range []string{ConsolePrefix + "alice", ConsolePrefix + "mallory (self-declared)"} {
		for _, st := range []Status{StatusApproved, StatusRejected} {
			r := &Record{TaskID: "t", Round: 1, Status: st, Text: "x", DecidedBy: by, EditedBy: by, Target: envelope.Target{Channel: "github"}}
			blocks, _ := message(r, nil)
			got, _ := json.Marshal(blocks)
			name := strings.TrimPrefix(by, ConsolePrefix)
			if strings.Contains(string(got), "<@") || !strings.Contains(string(got), "console operator "+name) {
				t.Errorf("%s by %q: got %s, want the console operator named and no Slack mention", st, by, got)
			}
		}
	}
}

func TestLongTextStaysWithinSlackLimits(t *testing.T) {
	t.Parallel()
	r := &Record{TaskID: "t", Round: 1, Status: StatusPending, Text: strings.Repeat("word ", 40000), Target: envelope.Target{Channel: "github"}}
	blocks, _ := message(r, nil)
	if len(blocks) > 50 {
		t.Errorf("message has %d blocks, Slack allows 50", len(blocks))
	}
	v := editView(r, viewMetadata{TaskID: "t", Round: 1, Thread: strings.Repeat("x", 5000)})
	if n := len(v.Blocks.BlockSet); n > 100 {
		t.Errorf("edit view has %d blocks, Slack allows 100", n)
	}
	if len(v.PrivateMetadata) > maxMetadata {
		t.Errorf("private_metadata is %d bytes, Slack allows %d", len(v.PrivateMetadata), maxMetadata)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(c *Config)
		ok   bool
	}{
		{"valid", func(*Config) {}, true},
		{"no channel", func(c *Config) { c.Channel = "" }, false},
		{"bad approver", func(c *Config) { c.Approvers = []string{"alice"} }, false},
		{"group approver", func(c *Config) { c.Approvers = []string{"S0GROUP1"} }, true},
		{"bad override", func(c *Config) { c.Channels = map[string]string{"github": "#general"} }, false},
		{"short ttl", func(c *Config) { c.TTL = 500 * time.Millisecond }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Config{Channel: "C0APPROVE1", Approvers: []string{"U0BOSS01"}}
			c.BotToken = secretFor("xoxb-1")
			tt.mod(&c)
			c.setDefaults()
			if err := c.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func secretFor(s string) secret.Value { return secret.New(s) }
