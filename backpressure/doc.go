// Package backpressure holds flow control stages: buffers with overflow
// strategies, and (in later work) in-flight and rate limiters.
//
// Every pipe in sluice is bounded and a full pipe stops the stage that feeds
// it, so a slow sink slows its source down. A Buffer is for the places where
// that is not what you want: it absorbs bursts up to its capacity and then
// applies its overflow strategy.
package backpressure
