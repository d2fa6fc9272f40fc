package main

import (
	"flag"
	"fmt"
	"strings"
)

// choiceFlag is a flag whose value is one of a fixed list of words: its
// help and its error both come from that list, so that neither can leave
// a choice out.
type choiceFlag struct {
	value   string
	choices []choice
}

// choice is one value of a choiceFlag and what it does.
type choice struct{ name, about string }

// choiceVar defines a choiceFlag on fs, its default def, its help usage
// followed by the choices and what each does.
func choiceVar(fs *flag.FlagSet, name, def, usage string, choices ...choice) *choiceFlag {
	c := &choiceFlag{value: def, choices: choices}
	parts, names := make([]string, len(choices)), make([]string, len(choices))
	for i, ch := range choices {
		parts[i], names[i] = fmt.Sprintf("%q (%s)", ch.name, ch.about), ch.name
	}
	// The choices in backquotes are what -h shows as the flag's value.
	fs.Var(c, name, fmt.Sprintf("%s (`%s`): %s", usage, strings.Join(names, "|"), orList(parts)))
	return c
}

func (c *choiceFlag) String() string {
	if c == nil {
		return ""
	}
	return c.value
}

// Set takes one of the choices, or says which there are.
func (c *choiceFlag) Set(s string) error {
	names := make([]string, len(c.choices))
	for i, ch := range c.choices {
		if ch.name == s {
			c.value = s
			return nil
		}
		names[i] = ch.name
	}
	return fmt.Errorf("want %s", orList(names))
}

// Get makes the flag a flag.Getter.
func (c *choiceFlag) Get() any { return c }

// orList joins words as "a, b or c".
func orList(words []string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
