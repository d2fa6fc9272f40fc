module github.com/sluice-streams/sluice

go 1.26.0

require (
	github.com/reugn/go-streams v0.13.0
	go.uber.org/goleak v1.3.0
	golang.org/x/time v0.16.0
)
