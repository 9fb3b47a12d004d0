package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/longterm"
	"github.com/relaystation/relay/memory/remote"
	memsvc "github.com/relaystation/relay/services/memory"
)

func init() {
	registerService(&service{
		name:        "memory",
		summary:     "sessions, long-term memory and retrieval; `relay memory remember|recall|forget` for operators",
		configure:   configureMemory,
		subcommands: runMemoryCLI,
	})
}

// configureMemory reads the worker's settings (memsvc.ReadSettings) and
// builds the worker on the stores they name.
func configureMemory(env *config.Env) buildFunc {
	s := memsvc.ReadSettings(env)
	return func(ctx context.Context, d *deps) (*runner, error) {
		m, err := s.Open(ctx, d.Bus, d.DataDir, d.Log)
		if err != nil {
			return nil, err
		}
		linger := s.Linger
		if linger == 0 {
			linger = -1 // RELAY_MEMORY_LINGER=0: never hold a batch
		}
		w, err := memsvc.New(memsvc.Config{Concurrency: s.Concurrency, Linger: linger, Logger: d.Log}, d.Bus, m.Memory)
		if err != nil {
			m.Close()
			return nil, err
		}
		return &runner{
			routes: func(srv *httpserver.Server) {
				for name, c := range m.Checks {
					srv.AddCheck(name, c)
				}
			},
			run:   w.Run,
			close: m.Close,
		}, nil
	}
}

const memoryUsage = `usage:
  relay memory                                   run the memory worker
  relay memory remember --thread T [--uri U] [--source S] "text"
  relay memory recall "query" [-k N] [--thread T] [--channel C] [--docs] [--json]
  relay memory forget --thread T`

// runMemoryCLI runs the operator commands against the running memory worker
// over the bus (request/reply), so they work with the embedded stores too.
func runMemoryCLI(ctx context.Context, a *app, args []string) error {
	if isHelp(args[0]) {
		fmt.Fprintln(a.stdout, memoryUsage)
		return nil
	}
	memsvc.ReadSettings(a.env) // the worker's settings may be set; they are not unknown
	if err := a.checkEnv(); err != nil {
		return err
	}
	cmd, args := args[0], args[1:]
	fs := a.flags("memory " + cmd)
	thread := fs.String("thread", "", "thread key, e.g. github:owner/repo#12")
	var run func(c *remote.Client, text string) error
	switch cmd {
	case "remember":
		uri := fs.String("uri", "", "URI of the original (makes the memory a document)")
		source := fs.String("source", "cli", "where the memory comes from")
		channel := fs.String("channel", "", "channel of the memory (default: from the thread key)")
		run = func(c *remote.Client, text string) error {
			if text == "" {
				return &exitError{code: 2, msg: "memory remember: the text is required\n" + memoryUsage}
			}
			ch := *channel
			if ch == "" && *thread != "" {
				ch = threadChannel(*thread)
			}
			m, err := c.Remember(ctx, memory.Note{Text: text, Thread: *thread, URI: *uri, Source: *source, Channel: ch})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "remembered %s (%s, thread %q)\n", m.ID, m.Kind, m.Thread)
			return nil
		}
	case "recall":
		k := fs.Int("k", 5, "number of memories to show")
		channel := fs.String("channel", "", "only memories of this channel")
		docs := fs.Bool("docs", false, "only documents (retrieve_docs)")
		asJSON := fs.Bool("json", false, "print JSON lines")
		run = func(c *remote.Client, text string) error {
			if text == "" {
				return &exitError{code: 2, msg: "memory recall: the query is required\n" + memoryUsage}
			}
			q := memory.Query{Text: text, K: *k, Thread: *thread, Channel: *channel}
			if *docs {
				q.Kind = longterm.KindDoc
			}
			refs, err := c.Retrieve(ctx, q)
			if err != nil {
				return err
			}
			return printRefs(a, refs, *asJSON)
		}
	case "forget":
		run = func(c *remote.Client, text string) error {
			if *thread == "" || text != "" {
				return &exitError{code: 2, msg: "memory forget: --thread T is required (and nothing else)\n" + memoryUsage}
			}
			f, err := c.Forget(ctx, *thread)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "forgot thread %s: its session, episodes and %d long-term memories\n", f.Thread, f.Memories)
			return nil
		}
	default:
		return &exitError{code: 2, msg: fmt.Sprintf("memory: unknown subcommand %q\n%s", cmd, memoryUsage)}
	}
	text, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	b, err := a.clientBus(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	return run(remote.NewClient(b.Conn(), b.Prefix(), 30*time.Second), text)
}

// parseInterspersed parses flags before and after the positional words, which
// it joins with spaces.
func parseInterspersed(fs *flag.FlagSet, args []string) (string, error) {
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			return "", err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		words = append(words, rest[0])
		args = rest[1:]
	}
	return strings.TrimSpace(strings.Join(words, " ")), nil
}

func threadChannel(thread string) string {
	ch, _, _ := strings.Cut(thread, ":")
	switch ch {
	case "slack", "github", "sentry", "openproject", "internal":
		return ch
	}
	return ""
}

func printRefs(a *app, refs []memory.Ref, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		for _, r := range refs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	return writeTable(a.stdout, "SCORE\tAGE\tSOURCE\tTHREAD\tID\tTEXT", func(line func(string, ...any)) {
		for _, r := range refs {
			text := clip.Line(r.Text, 80)
			if r.URI != "" {
				text += " <" + r.URI + ">"
			}
			line("%.3f\t%s\t%s\t%s\t%s\t%s", r.Score, age(time.Since(r.Created)), dash(r.Source), dash(r.Thread), r.ID, text)
		}
	}, fmt.Sprintf("%d memories", len(refs)))
}

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
