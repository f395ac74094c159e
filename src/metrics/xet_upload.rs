//! Counts the HTTP requests of Xet upload sessions, which the xet crates make themselves (xorb and
//! shard uploads, global dedup queries, CAS token refreshes): hubfs never sees those requests, but
//! the crates' HTTP client traces each one (a span per request, an event per answer or error),
//! and this `tracing` layer turns those into `hubfs_hub_requests_total{class="xet_upload"}` and
//! its latency histogram. It has a filter of its own, so it counts whatever `RUST_LOG` says.
//! Their bytes are added per upload from the session's report ([`xet_upload_sent`]).
//!
//! hubfs reads through its own fetcher, so every request of the crates' client is an upload's.

use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{FilterFn, Filtered};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::{Attempt, HubClass, hub_attempt};

/// Where the crates' HTTP client traces its requests (xet-client 1.8's `LoggingMiddleware`).
const TARGET: &str = "xet_client::common::http_client";
/// The span each request runs in, and the events of its end.
const SPAN: &str = "client::request";
const ANSWERED: &str = "Received CAS response";
const FAILED: &str = "Request error";

/// The layer, with its filter (only the crates' HTTP client's spans and events reach it).
pub fn layer<S>() -> Filtered<XetUploadRequests, FilterFn, S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    XetUploadRequests.with_filter(FilterFn::new(|m| m.target() == TARGET))
}

/// See the module doc.
pub struct XetUploadRequests;

/// When a request's span opened.
struct Started(Instant);

thread_local! {
    /// How long the request whose span just closed on this thread took. The client traces a
    /// request's answer right after its span closes, on the same thread and in the same poll
    /// (the event is outside the span), so the next event here is that request's.
    static LAST: std::cell::Cell<Option<Duration>> = const { std::cell::Cell::new(None) };
}

#[derive(Default)]
struct Fields {
    message: Option<String>,
    status: Option<u64>,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "status_code" {
            self.status = Some(value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == "status_code" {
            self.status = u64::try_from(value).ok();
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_string());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = Some(format!("{value:?}"));
        }
    }
}

impl<S> Layer<S> for XetUploadRequests
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() == SPAN
            && let Some(span) = ctx.span(id)
        {
            span.extensions_mut().insert(Started(Instant::now()));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && span.name() == SPAN
            && let Some(t) = span.extensions().get::<Started>()
        {
            let took = t.0.elapsed();
            LAST.with(|l| l.set(Some(took)));
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let attempt = match (f.message.as_deref(), f.status) {
            (Some(ANSWERED), Some(status)) => Attempt::Status {
                status: u16::try_from(status).unwrap_or(0),
                received: 0,
            },
            (Some(FAILED), _) => Attempt::Error,
            _ => return,
        };
        let elapsed = LAST.with(|l| l.take()).unwrap_or(Duration::ZERO);
        hub_attempt(HubClass::XetUpload, attempt, 0, elapsed);
    }
}

/// Bytes an upload session sent (xorbs and shards, from its report).
pub fn xet_upload_sent(bytes: u64) {
    super::hub_sent(HubClass::XetUpload, bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    fn count(status: &str) -> u64 {
        let m = super::super::get();
        let labels = super::super::RequestLabels {
            class: HubClass::XetUpload.as_str(),
            status: status.to_string(),
        };
        m.hub_requests.get_or_create(&labels).get()
    }

    /// The class's latency histogram: (sum of seconds, count).
    fn duration() -> (f64, u64) {
        let text = super::super::get().encode();
        let value = |name: &str| {
            let series = format!("hubfs_hub_request_duration_seconds_{name}{{class=\"xet_upload\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(series.as_str()))
                .map(|v| v.trim().parse::<f64>().unwrap())
                .unwrap_or(0.0)
        };
        (value("sum"), value("count") as u64)
    }

    #[test]
    fn answers_and_errors_of_the_crates_client_are_counted_whatever_the_log_filter() {
        const T: &str = "xet_client::common::http_client";
        // The log filter drops everything; the layer's own filter still sees the client's events.
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_filter(tracing_subscriber::EnvFilter::new("off")))
            .with(layer());
        let (ok, bad) = (count("200"), count("error"));
        let (sum, n) = duration();
        tracing::subscriber::with_default(subscriber, || {
            // As the client does it: the request runs in its span, its answer is traced after.
            {
                let span = tracing::info_span!(target: T, "client::request", api = "upload_xorb");
                let _g = span.enter();
                std::thread::sleep(Duration::from_millis(20));
            }
            tracing::info!(target: T, request_id = "x", status_code = 200u16, "Received CAS response");
            tracing::warn!(target: T, err = "reset", "Request error");
            // Another target's event of the same text is not the client's.
            tracing::info!(target: "elsewhere", status_code = 200u16, "Received CAS response");
        });
        assert_eq!(count("200") - ok, 1);
        assert_eq!(count("error") - bad, 1);
        let (sum_after, n_after) = duration();
        assert_eq!(n_after - n, 2);
        assert!(
            sum_after - sum >= 0.02,
            "the answered request's time is its span's: {}",
            sum_after - sum
        );
    }
}
