package hooks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/tick"
)

// watch polls the hooks file every interval and, when its content changed
// and stayed the same for two polls (a file being written is not read half
// way), loads it: a valid edit replaces the hooks in force, an invalid one
// keeps them and is logged with its problems. A deleted file keeps the hooks
// too. (Polling the content, not file events, also sees editors that replace
// the file and mounted ConfigMaps that swap a symlink.) It compares with the
// content New saw, so an edit between New and Run is not missed.
func (s *Service) watch(ctx context.Context, path string, interval time.Duration) {
	applied, pending := s.digest, []byte(nil)
	tick.Every(ctx, interval, func() {
		d := digest(path)
		switch {
		case d == nil || bytes.Equal(d, applied):
			pending = nil
		case !bytes.Equal(d, pending):
			pending = d // changed: wait for it to settle
		default:
			applied, pending = d, nil
			s.reload(ctx, path)
		}
	})
}

// reload loads path and, when it is valid (its servers and tools checked
// against the running tool runner, else its servers against Config.Servers),
// puts it in force.
func (s *Service) reload(ctx context.Context, path string) {
	f, err := Load(path)
	if err == nil {
		cat := s.CatalogFrom(ctx, f)
		if cat.Servers == nil && s.cfg.Servers != nil {
			cat.Servers = s.cfg.Servers() // no runner answered: mcp.json says which servers exist
		}
		probs := f.Check(cat)
		if errs := Errors(probs); len(errs) > 0 {
			err = &ValidationError{Path: path, Problems: errs}
		}
	}
	if err != nil {
		s.log.Error("hooks file edit refused; the previous hooks stay in force", "file", path, "err", err)
		return
	}
	s.SetHooks(f)
	s.log.Info("hooks file reloaded", "file", path, "hooks", len(f.Hooks))
	if err := s.filter(ctx, f); err != nil {
		s.log.Warn("hooks consumer keeps its previous subjects", "err", err)
	}
}

// digest is the SHA-256 of the file, or nil when it is missing or empty: an
// editor that truncates before it writes leaves an empty file for a moment,
// and putting that in force would drop every hook (a file that means "no
// hooks" says `hooks: []`).
func digest(path string) []byte {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || err != nil || len(b) == 0 {
		return nil
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

// noHooksSubject is the hooks consumer's filter when there are no hooks: an
// inbound subject no envelope is published on (inbound subjects are
// in.{channel}.{event}), so the worker is sent nothing instead of every
// inbound envelope to ignore. Such a consumer's position stays where it was,
// so the reload that adds the first hooks recreates it at new envelopes
// (restart), rather than letting it replay what passed while there were none.
const noHooksSubject = envelope.SubjectInbound + ".none"

// subjects is the hooks consumer's filter for f, relative to the prefix.
func subjects(f *File) []string {
	if subj := f.Subjects(); len(subj) > 0 {
		return subj
	}
	return []string{noHooksSubject}
}

// filter points the durable consumer at the subjects f's triggers need
// (noHooksSubject when f has none), when they differ from its current
// filter. A consumer that does not exist yet is left to Run, which creates
// it with the hooks in force.
func (s *Service) filter(ctx context.Context, f *File) error {
	var want []string
	for _, subj := range subjects(f) {
		want = append(want, s.bus.Subject(subj))
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream := s.bus.StreamName(envelope.SubjectInbound + ".>")
	c, err := s.bus.JetStream().Consumer(cctx, stream, s.cfg.Consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("consumer %s: %w", s.cfg.Consumer, err)
	}
	info, err := c.Info(cctx)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", s.cfg.Consumer, err)
	}
	cfg := info.Config
	have := cfg.FilterSubjects
	if len(have) == 0 && cfg.FilterSubject != "" {
		have = []string{cfg.FilterSubject}
	}
	if slices.Equal(slices.Sorted(slices.Values(have)), want) {
		return nil
	}
	cfg.FilterSubject, cfg.FilterSubjects = "", want
	if slices.Equal(have, []string{s.bus.Subject(noHooksSubject)}) {
		return s.restart(cctx, stream, cfg)
	}
	if _, err := s.bus.JetStream().UpdateConsumer(cctx, stream, cfg); err != nil {
		return fmt.Errorf("update consumer %s to %v: %w", s.cfg.Consumer, want, err)
	}
	s.log.Info("hooks consumer subjects", "subjects", want)
	return nil
}

// restart replaces the durable consumer with one of cfg that starts at new
// envelopes (at the stream's start with FromStart). The running pull loop fetches by name, so it carries on with
// the new consumer after one failed pull.
func (s *Service) restart(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) error {
	js := s.bus.JetStream()
	if err := js.DeleteConsumer(ctx, stream, cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("replace consumer %s: %w", cfg.Durable, err)
	}
	if !s.cfg.FromStart {
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverNewPolicy, 0, nil
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, stream, cfg); err != nil {
		return fmt.Errorf("recreate consumer %s on %v: %w", cfg.Durable, cfg.FilterSubjects, err)
	}
	s.log.Info("hooks consumer recreated at new envelopes", "subjects", cfg.FilterSubjects)
	return nil
}
