//! `courier paginate URL [--cursor [FIELD]] [--max-pages N] [--allow-cross-origin]`: every item
//! of every page, one compact JSON value per line, each page through the preset.
//!
//! Without `--cursor` it follows `Link: rel="next"` and the items are the body's top-level
//! array; a link to another origin than URL's ends the run with an error unless
//! `--allow-cross-origin` is given. With `--cursor`, it passes the body's FIELD (default
//! `next_cursor`) back as the `cursor` query parameter (a cursor already in URL is sent with the
//! first request, as is one given with `--resume-cursor`) and the items are the body's `items`
//! array.
//!
//! A listing reads at most [`DEFAULT_MAX_PAGES`] pages unless `--max-pages` says otherwise
//! (`--max-pages none`: no bound): a server whose every page links to a new one would otherwise
//! keep it running until killed. Reaching that default bound exits 1 (the listing may go on);
//! reaching a `--max-pages` the caller gave exits 0. Loops are refused at O(1) a page, the pages
//! remembered bounded ([`courier::paginate::Seen`]), so memory stays flat however long the
//! listing.
//!
//! A listing that stops before its end (a page bound, a failed page, Ctrl-C or SIGTERM) prints
//! on stderr the command that resumes it at the first page not printed: the next link, or the
//! next cursor. While stderr is a terminal, a progress line counts pages and items.

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;

use bytes::Bytes;
use clap::Args;
use courier::paginate::{CursorPosition, LinkPosition, Page};
use futures_util::{Stream, StreamExt};
use http_body_util::Full;
use url::Url;

use crate::client::{ClientArgs, describe};
use crate::config::ConfigArgs;
use crate::output::write_or_quit;
use crate::signal::{Stops, next_stop};
use crate::{USAGE_ERROR, parse};

/// The cursor field when `--cursor` names none.
const DEFAULT_CURSOR_FIELD: &str = "next_cursor";

/// The pages a listing reads when `--max-pages` is not given.
pub(crate) const DEFAULT_MAX_PAGES: u64 = 10_000;

/// Arguments of `courier paginate`.
#[derive(Debug, Args)]
pub(crate) struct PaginateArgs {
    /// The first page, an absolute http:// or https:// URL (or the page to resume from).
    #[arg(value_parser = parse::checked(parse::url))]
    url: Url,
    /// Follow a cursor in the JSON body instead of Link headers; FIELD names it.
    #[arg(
        long,
        value_name = "FIELD",
        num_args = 0..=1,
        default_missing_value = DEFAULT_CURSOR_FIELD,
        value_parser = parse::checked(parse::field),
    )]
    cursor: Option<String>,
    /// Start with this cursor, as printed by a listing that stopped early (needs --cursor).
    #[arg(long, value_name = "CURSOR", requires = "cursor")]
    resume_cursor: Option<String>,
    /// Stop after N pages; `none` reads until the listing ends [default: 10000, and reaching
    /// it exits 1].
    #[arg(long, value_name = "N", value_parser = parse::checked(parse::max_pages))]
    max_pages: Option<parse::PageBound>,
    /// Follow a Link to another origin (scheme, host or port) than URL's.
    #[arg(long)]
    allow_cross_origin: bool,
    #[command(flatten)]
    client: ClientArgs,
    #[command(flatten)]
    config: ConfigArgs,
}

/// Prints every item; exit 1 when a page fails or answers with a status other than 2xx.
pub(crate) fn run(args: PaginateArgs) -> ExitCode {
    let runtime = match crate::start_runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(pages(args))
}

async fn pages(args: PaginateArgs) -> ExitCode {
    let bound = args.max_pages.unwrap_or(parse::PageBound::Default);
    let layer = match &args.config.config {
        None => Ok(courier::CourierLayer::new()),
        Some(path) => crate::config::load(path, None).and_then(|config| {
            courier::CourierLayer::from_config(&config).map_err(|e| crate::config::lines(&e))
        }),
    };
    let client =
        match layer.and_then(|layer| Ok(args.client.transport()?.client::<Full<Bytes>>(layer))) {
            Ok(client) => client.boxed(),
            Err(message) => {
                say!("error: {message}");
                return USAGE_ERROR.into();
            }
        };
    let progress = Progress::new(io::stderr().is_terminal().then(io::stderr));
    let quoted = shell_quote(args.url.as_str());
    let mut options = String::new();
    if args.allow_cross_origin {
        options.push_str(" --allow-cross-origin");
    }
    match args.cursor {
        None => {
            let mut pages = courier::paginate::links::<_, Full<Bytes>>(client, args.url)
                .allow_cross_origin(args.allow_cross_origin);
            if let Some(max) = bound.pages() {
                pages = pages.max_pages(max);
            }
            let resume = |pages: &courier::paginate::LinkPages<_, _>| {
                let LinkPosition { next, .. } = pages.position();
                next.as_ref()
                    .map(|next| format!("courier paginate {}{options}", shell_quote(next.as_str())))
            };
            drain(pages, None, bound, progress, resume, |page| {
                format!(
                    "courier paginate {}{options}",
                    shell_quote(page.url().as_str())
                )
            })
            .await
        }
        Some(field) => {
            let cursor_flag = if field == DEFAULT_CURSOR_FIELD {
                " --cursor".to_owned()
            } else {
                format!(" --cursor={}", shell_quote(&field))
            };
            let position = CursorPosition {
                url: args.url,
                cursor: args.resume_cursor,
                pages: 0,
                done: false,
                seen: courier::paginate::Seen::default(),
            };
            let mut pages =
                courier::paginate::CursorPages::<_, Full<Bytes>>::resume(client, position)
                    .field(field);
            if let Some(max) = bound.pages() {
                pages = pages.max_pages(max);
            }
            let resume = |pages: &courier::paginate::CursorPages<_, _>| {
                let position = pages.position();
                if position.done {
                    return None;
                }
                Some(match &position.cursor {
                    Some(c) => format!(
                        "courier paginate {quoted}{cursor_flag} --resume-cursor {}{options}",
                        shell_quote(c)
                    ),
                    None => format!("courier paginate {quoted}{cursor_flag}{options}"),
                })
            };
            drain(pages, Some("items"), bound, progress, resume, |page| {
                format!(
                    "courier paginate {}{cursor_flag}{options}",
                    shell_quote(page.url().as_str())
                )
            })
            .await
        }
    }
}

/// Prints the items of every page of `pages`. When the listing stops before its end, prints
/// how to resume: `resume(&pages)` names the first page not fetched, `refetch(page)` a page
/// that was fetched but whose items could not be printed.
async fn drain<S, W>(
    mut pages: S,
    items_field: Option<&str>,
    bound: parse::PageBound,
    mut progress: Progress<W>,
    resume: impl Fn(&S) -> Option<String>,
    refetch: impl Fn(&Page) -> String,
) -> ExitCode
where
    S: Stream<Item = Result<Page, courier::Error>> + Unpin,
    W: Write,
{
    let mut stdout = io::stdout().lock();
    // No handlers: the default (the signal ends the process) stays.
    let mut stops = Stops::install().ok();
    loop {
        let page = tokio::select! {
            biased;
            stop = next_stop(&mut stops) => {
                progress.clear();
                say!("{}", stop.outcome());
                say_resume(resume(&pages));
                return stop.exit_status().into();
            }
            page = pages.next() => page,
        };
        let Some(page) = page else {
            break;
        };
        let page = match page {
            Ok(page) => page,
            Err(e) => {
                progress.clear();
                say!("error: {}", describe(&e));
                // A refused link or a loop would be refused again: no way to resume.
                if !matches!(e, courier::Error::Pagination(_)) {
                    say_resume(resume(&pages));
                }
                return ExitCode::FAILURE;
            }
        };
        if !page.status().is_success() {
            progress.clear();
            say!("error: {} answered {}", page.url(), page.status());
            say_resume(resume(&pages));
            return ExitCode::FAILURE;
        }
        let items = match page.json_items(items_field) {
            Ok(items) => items,
            Err(e) => {
                progress.clear();
                say!("error: {e}");
                say_resume(Some(refetch(&page)));
                return ExitCode::FAILURE;
            }
        };
        progress.clear();
        let mut lines = String::new();
        for item in &items {
            lines.push_str(&item.to_string());
            lines.push('\n');
        }
        if let Err(code) = write_or_quit(&mut stdout, lines.as_bytes())
            .and_then(|()| write_or_quit(&mut stdout, b""))
        {
            return code;
        }
        progress.page(items.len());
    }
    progress.finish();
    let Some(command) = resume(&pages) else {
        return ExitCode::SUCCESS;
    };
    if bound == parse::PageBound::Default {
        say!(
            "stopped after {DEFAULT_MAX_PAGES} pages, the default bound; the listing may go on \
             (give --max-pages N, or --max-pages none); resume with: {command}"
        );
        return ExitCode::FAILURE;
    }
    say!("stopped at --max-pages; resume with: {command}");
    ExitCode::SUCCESS
}

fn say_resume(command: Option<String>) {
    if let Some(command) = command {
        say!("resume with: {command}");
    }
}

/// `s` as one word for a POSIX shell.
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// `pages: 3, items: 30`, redrawn in place on stderr; only when stderr is a terminal (`out` is
/// `None` otherwise).
#[derive(Debug)]
struct Progress<W> {
    out: Option<W>,
    shown: bool,
    pages: u64,
    items: u64,
}

// === impl Progress ===

impl<W: Write> Progress<W> {
    fn new(out: Option<W>) -> Self {
        Self {
            out,
            shown: false,
            pages: 0,
            items: 0,
        }
    }

    fn page(&mut self, items: usize) {
        self.pages += 1;
        self.items += items as u64;
        if let Some(out) = &mut self.out {
            let _ = write!(out, "\rpages: {}, items: {}", self.pages, self.items);
            let _ = out.flush();
            self.shown = true;
        }
    }

    /// Erases the line, so that items or an error written to the same terminal start clean.
    fn clear(&mut self) {
        if self.shown
            && let Some(out) = &mut self.out
        {
            let _ = write!(out, "\r\x1b[2K");
            let _ = out.flush();
            self.shown = false;
        }
    }

    /// Leaves the last count on a line of its own.
    fn finish(&mut self) {
        if let Some(out) = &mut self.out {
            let _ = writeln!(out, "\rpages: {}, items: {}", self.pages, self.items);
            self.shown = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_redraws_one_line_and_clears_it_before_other_output() {
        let mut p = Progress::new(Some(Vec::new()));
        p.clear();
        p.page(10);
        p.clear();
        p.page(3);
        p.finish();
        let out = String::from_utf8(p.out.take().unwrap()).unwrap();
        assert_eq!(
            out,
            "\rpages: 1, items: 10\r\x1b[2K\rpages: 2, items: 13\rpages: 2, items: 13\n"
        );
    }

    #[test]
    fn shell_quote_leaves_plain_words_and_quotes_the_rest() {
        assert_eq!(
            shell_quote("http://h:1/items?page=3"),
            "'http://h:1/items?page=3'"
        );
        assert_eq!(shell_quote("http://h:1/items"), "http://h:1/items");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn progress_off_a_terminal_writes_nothing() {
        let mut p = Progress::<Vec<u8>>::new(None);
        p.page(10);
        p.clear();
        p.finish();
        assert!(p.out.is_none());
        assert_eq!((p.pages, p.items), (1, 10));
    }
}
