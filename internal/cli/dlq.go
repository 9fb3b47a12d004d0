package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
)

func init() {
	registerCommand(&command{
		name:    "dlq",
		usage:   "list|replay",
		summary: "show dead letters (`dlq list [-n N] [-json]`) or re-publish them (`dlq replay <seq>... | --all`)",
		run:     runDLQ,
	})
}

const dlqUsage = "usage: relay dlq list [-n N] [-json] | relay dlq replay <seq>... | --all"

func runDLQ(ctx context.Context, a *app, args []string) error {
	if err := a.checkEnv(); err != nil {
		return err
	}
	return subcommands{"list": dlqList, "replay": dlqReplay}.run(ctx, a, "dlq", dlqUsage, args)
}

func dlqList(ctx context.Context, a *app, args []string) error {
	fs := a.flags("dlq list")
	limit := fs.Int("n", 0, "show at most N dead letters (0: all)")
	asJSON := fs.Bool("json", false, "print a JSON array of the dead letters")
	b, err := a.parseDial(ctx, fs, args)
	if err != nil {
		return err
	}
	defer b.Close()
	dls, err := b.DeadLetters(ctx, *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		// One JSON array: [] when there are none.
		return json.NewEncoder(a.stdout).Encode(dls)
	}
	return writeTable(a.stdout, "SEQ\tAGE\tCONSUMER\tSUBJECT\tDELIVERIES\tENVELOPE\tREASON", func(line func(string, ...any)) {
		for _, d := range dls {
			id := "-"
			var e struct{ ID string }
			if json.Unmarshal(d.Envelope, &e) == nil && e.ID != "" {
				id = e.ID
			}
			line("%d\t%s\t%s\t%s\t%d\t%s\t%s", d.Seq, time.Since(d.Time).Round(time.Second), d.Consumer,
				d.Subject, d.Deliveries, id, clip.Line(d.Reason, 120))
		}
	}, fmt.Sprintf("%d dead letter(s)", len(dls)))
}

func dlqReplay(ctx context.Context, a *app, args []string) error {
	if len(args) == 0 {
		return &exitError{code: 2, msg: "usage: relay dlq replay <seq>... | --all"}
	}
	b, err := a.clientBus(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	var seqs []uint64
	if len(args) == 1 && (args[0] == "--all" || args[0] == "-all") {
		dls, err := b.DeadLetters(ctx, 0)
		if err != nil {
			return err
		}
		for _, d := range dls {
			seqs = append(seqs, d.Seq)
		}
	} else {
		for _, s := range args {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return &exitError{code: 2, msg: fmt.Sprintf("dlq replay: %q is not a dead-letter sequence number (see `relay dlq list`)", s)}
			}
			seqs = append(seqs, n)
		}
	}
	failed := 0
	for _, seq := range seqs {
		res, err := b.Replay(ctx, seq)
		if err != nil {
			failed++
			fmt.Fprintf(a.stderr, "replay %d: %v\n", seq, err)
			continue
		}
		fmt.Fprintf(a.stdout, "replayed %d -> %s seq %d%s\n", seq, res.Stream, res.Sequence, map[bool]string{true: " (duplicate, already replayed)"}[res.Duplicate])
	}
	if failed > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("%d of %d replays failed", failed, len(seqs))}
	}
	return nil
}

var _ = envelope.Version
