package tools

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Prompter is the Elicitor of a person at a terminal (`relay mcp call`): it
// prints the server's message, asks whether to answer, decline or cancel,
// then asks each field on its own line (an empty line takes the default).
// End of input means nobody is there (ErrNoHuman). Questions are asked one
// at a time. A cancelled ctx returns at once, leaving the pending read to
// the next question.
type Prompter struct {
	out   io.Writer
	lines chan string
	once  sync.Once
	in    io.Reader
	mu    sync.Mutex
}

// NewPrompter reads answers from in and writes the questions to out.
func NewPrompter(in io.Reader, out io.Writer) *Prompter {
	return &Prompter{in: in, out: out, lines: make(chan string)}
}

func (p *Prompter) read() {
	sc := bufio.NewScanner(p.in)
	for sc.Scan() {
		p.lines <- sc.Text()
	}
	close(p.lines)
}

func (p *Prompter) line(ctx context.Context) (string, error) {
	p.once.Do(func() { go p.read() })
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case l, ok := <-p.lines:
		if !ok {
			return "", fmt.Errorf("%w: end of input", ErrNoHuman)
		}
		return strings.TrimSpace(l), nil
	}
}

// Elicit implements Elicitor.
func (p *Prompter) Elicit(ctx context.Context, q *Question) (*Answer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	call := q.Server
	if q.Tool != "" {
		call += "." + q.Tool
	}
	fmt.Fprintf(p.out, "\n%s asks: %s\n", call, q.Message)
	for {
		fmt.Fprint(p.out, "Answer (a), decline (d) or cancel (c)? [a] ")
		l, err := p.line(ctx)
		if err != nil {
			return nil, err
		}
		switch strings.ToLower(l) {
		case "", "a", "answer":
		case "d", "decline":
			return &Answer{Action: ElicitDecline}, nil
		case "c", "cancel":
			return &Answer{Action: ElicitCancel}, nil
		default:
			continue
		}
		break
	}
	content := map[string]any{}
	for _, f := range Fields(q.Schema) {
		for {
			fmt.Fprint(p.out, prompt(&f))
			l, err := p.line(ctx)
			if err != nil {
				return nil, err
			}
			v, err := f.Parse(l)
			if errors.Is(err, ErrEmpty) {
				if f.Default != nil {
					content[f.Name] = f.Default
					break
				}
				if !f.Required {
					break
				}
				err = fmt.Errorf("%s is required", f.Label())
			}
			if err != nil {
				fmt.Fprintln(p.out, "  "+err.Error())
				continue
			}
			content[f.Name] = v
			break
		}
	}
	return &Answer{Action: ElicitAccept, Content: content}, nil
}

func prompt(f *Field) string {
	var b strings.Builder
	b.WriteString("  " + f.Label())
	var notes []string
	if f.Description != "" {
		notes = append(notes, f.Description)
	}
	if len(f.Options) > 0 {
		vals := make([]string, len(f.Options))
		for i, o := range f.Options {
			vals[i] = o.Value
		}
		sep := " | "
		if f.Type == "array" {
			sep = ", "
		}
		notes = append(notes, strings.Join(vals, sep))
	} else if f.Type == "boolean" {
		notes = append(notes, "yes/no")
	} else if f.Type != "" && f.Type != "string" {
		notes = append(notes, f.Type)
	}
	if len(notes) > 0 {
		b.WriteString(" (" + strings.Join(notes, "; ") + ")")
	}
	if f.Default != nil {
		fmt.Fprintf(&b, " [%v]", f.Default)
	} else if f.Required {
		b.WriteString(" *")
	}
	b.WriteString(": ")
	return b.String()
}
