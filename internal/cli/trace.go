package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/relaystation/relay/internal/story"
)

func init() {
	registerCommand(&command{
		name:    "trace",
		usage:   "<delivery-id|thread|task-id> [-json] [-since D] [-n N]",
		summary: "print the story of a webhook delivery, thread or task: every hop from the webhook to the posted answer",
		run:     runTrace,
	})
}

const traceUsage = "usage: relay trace <delivery-id|thread|task-id> [-json] [-since D] [-n N]"

func runTrace(ctx context.Context, a *app, args []string) error {
	if err := a.checkEnv(); err != nil {
		return err
	}
	fs := a.flags("trace")
	asJSON := fs.Bool("json", false, "print the story as one JSON object")
	since := fs.Duration("since", 0, "read inbound webhooks of this long ago only (0: the stream's whole retention)")
	limit := fs.Int("n", 1000, "show at most N hops")
	id, err := parseInterspersed(fs, args)
	if err != nil || id == "" || strings.Contains(id, " ") {
		return &exitError{code: 2, msg: traceUsage}
	}
	st, err := traceStory(ctx, a, id, story.Options{Since: *since, Limit: *limit})
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(a.stdout).Encode(st)
	}
	return printStory(a.stdout, st)
}

// traceStory builds the story over a client connection to the bus.
func traceStory(ctx context.Context, a *app, id string, o story.Options) (*story.Story, error) {
	b, err := a.clientBus(ctx)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	st, err := story.BuildWith(ctx, b, id, o)
	if errors.Is(err, story.ErrNotFound) {
		return nil, &exitError{code: 1, msg: fmt.Sprintf("trace: %v; give a delivery id (X-GitHub-Delivery, ...), a thread key (github:owner/repo#1) or a task id", err)}
	}
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", id, err)
	}
	return st, nil
}

// printStory writes one line per hop (time, time since the previous hop,
// kind, summary, link), then what the story is about.
func printStory(w io.Writer, st *story.Story) error {
	return writeTable(w, "TIME\tDELTA\tKIND\tSUMMARY\tLINK", func(line func(string, ...any)) {
		for _, h := range st.Hops {
			sum := h.Summary
			if h.Duration > 0 {
				sum += " [" + h.Duration.Round(time.Millisecond).String() + "]"
			}
			line("%s\t+%s\t%s\t%s\t%s", h.Time.UTC().Format("15:04:05.000"), h.Since.Round(time.Millisecond), h.Kind, sum, orDash(h.Link))
		}
	}, fmt.Sprintf("story of %s: thread %s, %d task(s), %d hop(s)", st.Query, orDash(st.Thread), len(st.Tasks), len(st.Hops)))
}
