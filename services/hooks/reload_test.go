package hooks

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
)

func hookFile(name string) string {
	return "hooks:\n  - name: " + name + "\n    on: [github.issues.opened]\n    actions:\n      - type: mcp\n        parameters: {serverId: s, toolName: t}\n"
}

// TestReloadOnEdit: a valid edit takes effect; an invalid one keeps the
// hooks in force and says why.
func TestReloadOnEdit(t *testing.T) {
	t.Parallel()
	s, path, logs := watching(t, Config{})
	must := mustOf(t)

	must(os.WriteFile(path, []byte(hookFile("second")), 0o600))
	testenv.WaitFor(t, 10*time.Second, "the edit in force", func() bool { return s.Hooks().Hook("second") != nil })

	must(os.WriteFile(path, []byte(hookFile("third")+"        colour: red\n"), 0o600))
	testenv.WaitFor(t, 10*time.Second, "the invalid edit refused", func() bool { return strings.Contains(logs.String(), "colour") })
	if s.Hooks().Hook("second") == nil || s.Hooks().Hook("third") != nil {
		t.Errorf("after an invalid edit: got hooks %v, want second still in force", s.Hooks().Hooks)
	}
	if !strings.Contains(logs.String(), "edit refused; the previous hooks stay in force") {
		t.Errorf("log: got %q, want the refusal said", logs.String())
	}
}

// watching writes hookFile("first") to a new hooks file and starts a
// service of cfg on it (on an embedded bus, with no tool runner) and its
// watch loop; it returns the service, the file and the service's log.
func watching(t *testing.T, cfg Config) (*Service, string, *testenv.Buffer) {
	t.Helper()
	b := bustest.Embedded(t)
	path := filepath.Join(t.TempDir(), "hooks.yaml")
	must := mustOf(t)
	must(os.WriteFile(path, []byte(hookFile("first")), 0o600))
	f, err := Load(path)
	must(err)
	var logs testenv.Buffer
	cfg.Hooks, cfg.Path, cfg.ReloadInterval = f, path, 10*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s, err := New(t.Context(), cfg, b)
	must(err)
	testenv.Go(t, "watch", func(ctx context.Context) error { s.watch(ctx, path, 10*time.Millisecond); return nil })
	return s, path, &logs
}

func triggerFile(on ...string) string {
	return "hooks:\n  - name: h\n    on: [" + strings.Join(on, ", ") + "]\n    actions:\n      - type: mcp\n        parameters: {serverId: s, toolName: t}\n"
}

// TestConsumerFiltersTriggerSubjects: the hooks consumer is sent only the
// inbound subjects the triggers name (in.{channel}.{event}, once each), and
// a reload that changes the triggers changes its filter.
func TestConsumerFiltersTriggerSubjects(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	path := filepath.Join(t.TempDir(), "hooks.yaml")
	testenv.WriteFile(t, path, triggerFile("github.issues.opened", "github.issues.labeled", "sentry.issue.created"))
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Subjects(), []string{"in.github.issues", "in.sentry.issue"}; !slices.Equal(got, want) {
		t.Fatalf("Subjects: got %v, want %v", got, want)
	}
	s, err := New(t.Context(), Config{Hooks: f, Path: path, ReloadInterval: 10 * time.Millisecond, Consumer: "hooks-filter"}, b)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Go(t, "Run", s.Run)
	info := func() *jetstream.ConsumerInfo { return consumerInfo(t, b, "hooks-filter") }
	testenv.WaitFor(t, 10*time.Second, "the hooks consumer", func() bool { return info() != nil })
	if got, want := filter(info()), []string{b.Subject("in.github.issues"), b.Subject("in.sentry.issue")}; !slices.Equal(got, want) {
		t.Fatalf("filter: got %v, want %v", got, want)
	}

	slack := func() { publishSlack(t, b) }
	slack()
	if ci := info(); ci == nil || ci.NumPending != 0 || ci.NumAckPending != 0 || ci.Delivered.Stream != 0 {
		t.Fatalf("after an in.slack.message envelope: got %+v, want nothing pending or delivered", ci)
	}

	testenv.WriteFile(t, path, triggerFile("slack.message"))
	testenv.WaitFor(t, 10*time.Second, "the filter to follow the edit", func() bool {
		ci := info()
		return ci != nil && slices.Equal(filter(ci), []string{b.Subject("in.slack.message")})
	})
	slack()
	testenv.WaitFor(t, 10*time.Second, "the in.slack.message envelope delivered", func() bool {
		ci := info()
		return ci != nil && ci.Delivered.Stream > 0
	})
}

// consumerInfo is the durable consumer name of the inbound stream; nil
// while it does not exist.
func consumerInfo(t *testing.T, b *bus.Bus, name string) *jetstream.ConsumerInfo {
	ci, _ := bustest.ConsumerInfo(t.Context(), b, "in.>", name)
	return ci
}

// filter is a consumer's filter subjects.
func filter(ci *jetstream.ConsumerInfo) []string {
	if ci.Config.FilterSubject != "" {
		return []string{ci.Config.FilterSubject}
	}
	return ci.Config.FilterSubjects
}

// publishSlack publishes an in.slack.message envelope and returns its stream
// sequence.
func publishSlack(t *testing.T, b *bus.Bus) uint64 {
	t.Helper()
	e := envelope.New(envelope.ChannelSlack, envelope.RoleUser, "hello")
	e.Meta.Source = &envelope.Source{Event: "message"}
	ack, err := b.Publish(t.Context(), envelope.Inbound(envelope.ChannelSlack, "message"), e)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// TestNoHooksConsumerIsSentNothing: with no hooks the consumer filters on a
// subject no envelope uses, so it is sent no inbound envelope to ignore; the
// first hooks, added by a reload or present at a restart, start at new
// envelopes, without the ones that passed while there were none.
func TestNoHooksConsumerIsSentNothing(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"reload", "restart"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := bustest.Embedded(t)
			path := filepath.Join(t.TempDir(), "hooks.yaml")
			must := mustOf(t)
			must(os.WriteFile(path, []byte("hooks: []\n"), 0o600))
			start := func(f *File) func() {
				s, err := New(t.Context(), Config{Hooks: f, Path: path, ReloadInterval: 10 * time.Millisecond, Consumer: "hooks-none"}, b)
				must(err)
				return testenv.Go(t, "Run", s.Run)
			}
			info := func() *jetstream.ConsumerInfo { return consumerInfo(t, b, "hooks-none") }
			hasFilter := func(want ...string) func() bool {
				return func() bool { ci := info(); return ci != nil && slices.Equal(filter(ci), want) }
			}
			stop := start(&File{})
			testenv.WaitFor(t, 10*time.Second, "the consumer on "+noHooksSubject, hasFilter(b.Subject(noHooksSubject)))
			publishSlack(t, b)
			if ci := info(); ci.Delivered.Consumer != 0 || ci.NumPending != 0 || ci.NumAckPending != 0 {
				t.Fatalf("without hooks: got %d delivered, %d pending, %d unacknowledged; want none", ci.Delivered.Consumer, ci.NumPending, ci.NumAckPending)
			}
			must(os.WriteFile(path, []byte(triggerFile("slack.message")), 0o600))
			if how == "restart" {
				stop()
				f, err := Load(path)
				must(err)
				start(f)
			}
			testenv.WaitFor(t, 10*time.Second, "the filter to follow the hooks", hasFilter(b.Subject("in.slack.message")))
			fresh := publishSlack(t, b)
			testenv.WaitFor(t, 10*time.Second, "the new envelope delivered", func() bool {
				ci := info()
				return ci != nil && ci.Delivered.Stream >= fresh
			})
			if ci := info(); ci.Delivered.Consumer != 1 {
				t.Errorf("got %d deliveries, want 1 (the new envelope, not the old one again)", ci.Delivered.Consumer)
			}
		})
	}
}

// mustOf is a check that ends t on any error.
func mustOf(t *testing.T) func(error) {
	return func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestDigestIgnoresEmptyFile: a file an editor has truncated but not yet
// written is not a change to put in force (it would drop every hook).
func TestDigestIgnoresEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hooks.yaml")
	testenv.WriteFile(t, path, "")
	if d := digest(path); d != nil {
		t.Errorf("digest of an empty file: got %x, want nil", d)
	}
	testenv.WriteFile(t, path, "hooks: []\n")
	if d := digest(path); d == nil {
		t.Error("digest of `hooks: []`: got nil, want a digest")
	}
}

// TestReloadChecksServersWithoutRunner: with no tool runner answering, a
// reload still refuses an edit naming a server mcp.json lacks.
func TestReloadChecksServersWithoutRunner(t *testing.T) {
	t.Parallel()
	s, path, logs := watching(t, Config{Servers: func() []string { return []string{"s"} }})
	must := mustOf(t)

	must(os.WriteFile(path, []byte(strings.Replace(hookFile("typo"), "serverId: s", "serverId: nope", 1)), 0o600))
	testenv.WaitFor(t, 10*time.Second, "the edit refused", func() bool { return strings.Contains(logs.String(), "edit refused") })
	if s.Hooks().Hook("first") == nil || s.Hooks().Hook("typo") != nil {
		t.Errorf("after an edit naming server nope: got hooks %v, want first still in force", s.Hooks().Hooks)
	}
	if !strings.Contains(logs.String(), `server \"nope\" is not in mcp.json`) {
		t.Errorf("log: got %q, want the missing server named", logs.String())
	}
	must(os.WriteFile(path, []byte(hookFile("second")), 0o600))
	testenv.WaitFor(t, 10*time.Second, "the valid edit in force", func() bool { return s.Hooks().Hook("second") != nil })
}
