package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/services/ingest"
)

func init() {
	registerCommand(&command{
		name:    "send",
		usage:   "github|slack|sentry|openproject [--event NAME] [--file F] [--to URL]",
		summary: "sign and post an example webhook (a real delivery) to the relay with the configured secret, and say how to follow it",
		run:     runSend,
	})
}

const sendUsage = "usage: relay send github|slack|sentry|openproject [--event NAME] [--file F] [--to URL]"

// sender is how `relay send` builds one provider's webhook.
type sender struct {
	// examples are the provider's example deliveries; an example's event is
	// its file name up to the first dot.
	examples fs.FS
	// event is the default --event.
	event string
	// route is the path suffix after /webhooks/{provider} ("" or "/events").
	route string
	// prepare makes body a fresh delivery (a new delivery id where the
	// provider sends one) and sets the signed headers on h.
	prepare func(h http.Header, event string, body []byte, key string, now time.Time) ([]byte, error)
}

var senders = map[string]sender{
	"github": {examples: github.Examples, event: "issues", prepare: func(h http.Header, event string, body []byte, key string, _ time.Time) ([]byte, error) {
		h.Set("Content-Type", "application/json")
		github.SetHeaders(h, event, uuid.NewString(), "0", github.Sign([]byte(key), body))
		return body, nil
	}},
	"slack": {examples: slack.Examples, event: "app_mention", route: "/events", prepare: func(h http.Header, _ string, body []byte, key string, now time.Time) ([]byte, error) {
		// Slack de-duplicates by event_id: a new one per send.
		body, err := withFields(body, map[string]any{"event_id": "EvSEND" + strings.ToUpper(randomHex(5)), "event_time": now.Unix()})
		if err != nil {
			return nil, err
		}
		ts := strconv.FormatInt(now.Unix(), 10)
		h.Set("Content-Type", "application/json")
		h.Set(slack.HeaderTimestamp, ts)
		h.Set(slack.HeaderSignature, slack.SignatureHeader(key, ts, body))
		return body, nil
	}},
	"sentry": {examples: sentry.Examples, event: "issue", prepare: func(h http.Header, event string, body []byte, key string, now time.Time) ([]byte, error) {
		h.Set("Content-Type", "application/json")
		h.Set(sentry.HeaderResource, event)
		h.Set(sentry.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		h.Set(sentry.HeaderRequestID, uuid.NewString())
		h.Set(sentry.HeaderSignature, sentry.SignatureHeader(key, body))
		return body, nil
	}},
	"openproject": {examples: openproject.Examples, event: "work_package", prepare: func(h http.Header, _ string, body []byte, key string, _ time.Time) ([]byte, error) {
		h.Set("Content-Type", "application/json")
		h.Set(openproject.HeaderSignature, openproject.SignatureHeader(key, body))
		return body, nil
	}},
}

func runSend(ctx context.Context, a *app, args []string) error {
	if err := a.checkEnv(); err != nil {
		return err
	}
	flags := a.flags("send")
	event := flags.String("event", "", "the event (GitHub's X-GitHub-Event, Slack's event type, Sentry's resource, OpenProject's resource); default: the provider's example")
	file := flags.String("file", "", "send this file's body instead of the built-in example")
	to := flags.String("to", "", "the relay's base URL or the webhook URL (default: the relay started from this folder, else RELAY_HTTP_ADDR)")
	name, err := parseInterspersed(flags, args)
	if err != nil {
		return &exitError{code: 2, msg: sendUsage}
	}
	snd, ok := senders[name]
	if !ok {
		return &exitError{code: 2, msg: sendUsage}
	}
	var ps ingest.ProviderSettings
	for _, p := range ingest.ReadSettings(a.env).Providers {
		if p.Name == name {
			ps = p
		}
	}
	if !ps.Secret.IsSet() {
		return fmt.Errorf("send %s: %s is not set: set it to the secret the relay was started with (it refuses unsigned webhooks)", name, ps.SecretVar)
	}
	ev := *event
	var body []byte
	if *file != "" {
		if body, err = os.ReadFile(*file); err != nil {
			return fmt.Errorf("send %s: %w", name, err)
		}
		ev = cmp.Or(ev, snd.event)
	} else if body, ev, err = example(snd, cmp.Or(ev, snd.event)); err != nil {
		return fmt.Errorf("send %s: %w", name, err)
	}
	target, why, err := a.sendTarget(*to, name, snd.route)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "relay: sending to %s: %s\n", target, why)
	now := time.Now()
	h := http.Header{}
	h.Set("User-Agent", "relay-send")
	if body, err = snd.prepare(h, ev, body, ps.Secret.Reveal(), now); err != nil {
		return fmt.Errorf("send %s: %w", name, err)
	}
	// The provider's own mapping says which delivery and thread the relay
	// will see.
	delivery, thread := "", ""
	if res, err := ps.New().Map(&mappers.Request{Route: strings.TrimPrefix(snd.route, "/"), Header: h, Body: body, Received: now}); err == nil && len(res.Items) > 0 {
		e := res.Items[0].Envelope
		thread = e.Meta.Thread
		if e.Meta.Source != nil {
			delivery = e.Meta.Source.DeliveryID
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("send %s: %w", name, err)
	}
	req.Header = h
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("send %s to %s: %w (is `relay serve` running? else give --to)", name, target, err)
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	fmt.Fprintf(a.stdout, "sent %s %s delivery %s (%d bytes) to %s\n", name, ev, orDash(delivery), len(body), target)
	fmt.Fprintf(a.stdout, "answer: %s %s\n", resp.Status, clip.Line(strings.TrimSpace(string(answer)), 300))
	if resp.StatusCode >= 300 {
		if resp.StatusCode == http.StatusUnauthorized {
			fmt.Fprintf(a.stdout, "the relay refused the signature: start it with the same %s as this shell\n", ps.SecretVar)
		}
		return &exitError{code: 1}
	}
	if thread != "" {
		fmt.Fprintf(a.stdout, "thread: %s\n", thread)
	}
	if delivery != "" {
		fmt.Fprintf(a.stdout, "follow it: relay trace %s\n", delivery)
		if c := a.consoleURL(); c != "" {
			fmt.Fprintf(a.stdout, "console:   %s/story?id=%s\n", c, url.QueryEscape(delivery))
		}
	}
	return nil
}

// sendTarget is the webhook URL: --to (a base URL gets the provider's path)
// or the relay found from this folder.
func (a *app) sendTarget(to, name, route string) (target, why string, err error) {
	base, why := a.httpURL()
	if to != "" {
		base, why = to, "--to"
	}
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", "", &exitError{code: 2, msg: fmt.Sprintf("send: %q is not an http(s) URL", base)}
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/webhooks/" + name + route
	}
	return u.String(), why, nil
}

// example returns the provider's example delivery for event: the file
// {event}.json, else the first {event}.*.json.
func example(snd sender, event string) ([]byte, string, error) {
	var names, events []string
	_ = fs.WalkDir(snd.examples, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
			ev, _, _ := strings.Cut(path.Base(p), ".")
			if !slices.Contains(events, ev) {
				events = append(events, ev)
			}
		}
		return nil
	})
	slices.Sort(names)
	for _, p := range names {
		b := path.Base(p)
		if b == event+".json" || strings.HasPrefix(b, event+".") {
			body, err := fs.ReadFile(snd.examples, p)
			return body, event, err
		}
	}
	return nil, "", fmt.Errorf("no example for event %q; examples: %s (or give --file)", event, strings.Join(events, ", "))
}

// withFields returns the JSON object body with top-level fields set.
func withFields(body []byte, fields map[string]any) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("body is not a JSON object: %w", err)
	}
	for k, v := range fields {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		doc[k] = b
	}
	return json.Marshal(doc)
}
