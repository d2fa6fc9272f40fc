package ownsim

import (
	"context"
	"os"
	"testing"
)

func TestScenariosSmall(t *testing.T) {
	var rs []Result
	for _, sc := range Scenarios {
		r, err := Run(context.Background(), Config{Members: 10, Partitions: 64}, sc)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	WriteTable(os.Stdout, rs)
}

func TestBig(t *testing.T) {
	if os.Getenv("OWNSIM_BIG") == "" {
		t.Skip()
	}
	scs := Scenarios
	if s := os.Getenv("OWNSIM_BIG"); s != "all" {
		scs = []string{s}
	}
	var rs []Result
	for _, sc := range scs {
		r, err := Run(context.Background(), Config{Members: 500, Partitions: 4096}, sc)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
		t.Log(sc, r.Steps, r.Elapsed)
	}
	WriteTable(os.Stdout, rs)
}
