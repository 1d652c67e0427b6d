//! `courier completions SHELL`: a completion script that names every subcommand.

mod common;

use common::courier;

#[tokio::test]
async fn completions_name_the_subcommands_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _courier"),
        ("zsh", "#compdef courier"),
        ("fish", "complete -c courier"),
    ] {
        let run = courier(&["completions", shell]).await;
        assert_eq!(run.code, 0, "{shell}: {run:?}");
        assert!(run.stdout.contains(marker), "{shell}: {}", run.stdout);
        for sub in ["request", "batch", "paginate", "serve", "demo"] {
            assert!(run.stdout.contains(sub), "{shell} lacks {sub}");
        }
        assert!(run.stdout.contains("cacert"), "{shell}: options too");
    }
    let run = courier(&["completions", "tcsh"]).await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("possible values"), "{run:?}");
}
