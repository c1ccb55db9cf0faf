"""kltool completion: the shell completion script (click's), for bash, zsh or fish."""

from __future__ import annotations

import click

INSTALL = {
    "bash": "eval \"$(kltool completion bash)\"            # in ~/.bashrc",
    "zsh": "eval \"$(kltool completion zsh)\"             # in ~/.zshrc (after compinit)",
    "fish": "kltool completion fish > ~/.config/fish/completions/kltool.fish",
}


@click.command("completion")
@click.argument("shell", type=click.Choice(sorted(INSTALL)))
@click.pass_obj
def command(out, shell):
    """Print the completion script for SHELL (bash, zsh or fish): subcommands, options, choices
    and paths complete on TAB. Install it with

    \b
      bash:  eval "$(kltool completion bash)"     in ~/.bashrc
      zsh:   eval "$(kltool completion zsh)"      in ~/.zshrc (after compinit)
      fish:  kltool completion fish > ~/.config/fish/completions/kltool.fish
    """
    from click.shell_completion import get_completion_class

    from ..cli import cli

    cls = get_completion_class(shell)
    script = cls(cli, {}, "kltool", "_KLTOOL_COMPLETE").source()
    out.write(script if script.endswith("\n") else script + "\n")
    return 0
