# bash completion for rangeshim(1)                        -*- shell-script -*-
# Installed by `make install` as share/bash-completion/completions/rangeshim.
# The subcommands, options and values are those of shim/cli/iface.c;
# tests/test_cli.c (interface_agrees) fails when the two differ.

_rangeshim()
{
    local cur prev words cword
    if declare -F _init_completion >/dev/null 2>&1; then
        _init_completion || return
    else
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD-1]}
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi

    local commands="run env locks stats check agent clean help"
    if [[ $cword -eq 1 ]]; then
        COMPREPLY=($(compgen -W "$commands --help --version" -- "$cur"))
        return
    fi

    local cmd=${words[1]} i
    case $prev in
        --scope) COMPREPLY=($(compgen -W "off process node cluster" -- "$cur")); return ;;
        --lock) COMPREPLY=($(compgen -W "range mutex" -- "$cur")); return ;;
        --log) COMPREPLY=($(compgen -W "error warn info debug" -- "$cur")); return ;;
        --lib) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --paths|--shm|--seconds|--block|--readers|--watch|-p|--pid) return ;;
        -o|--output)
            COMPREPLY=($(compgen -W "$(rangeshim locks -H 2>/dev/null | awk 'NR > 1 { print $1 }')" -- "$cur"))
            return ;;
    esac

    case $cmd in
        run)
            # After the command to run, complete its own words.
            for ((i = 2; i < cword; i++)); do
                if [[ ${words[i]} == -- || ${words[i]} != -* ]]; then
                    local j=$i
                    [[ ${words[i]} == -- ]] && j=$((i + 1))
                    if [[ $j -eq $cword ]]; then
                        COMPREPLY=($(compgen -c -- "$cur"))
                    else
                        COMPREPLY=($(compgen -f -- "$cur"))
                    fi
                    return
                fi
                case ${words[i]} in --scope|--lock|--paths|--log|--shm|--lib) i=$((i + 1)) ;; esac
            done
            COMPREPLY=($(compgen -W "--scope --lock --paths --stats --stats= --log --shm --lib -h --help" -- "$cur"))
            [[ $cur == -* ]] || COMPREPLY=($(compgen -c -- "$cur"))
            ;;
        env)
            COMPREPLY=($(compgen -W "--scope --lock --paths --stats --stats= --log --shm --lib -h --help" -- "$cur")) ;;
        locks)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--shm -J --json -p --pid -o --output -n --noheadings -i --noinaccessible -r --raw --output-all -u --notruncate -b --bytes -H --list-columns --watch -h --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -f -- "$cur"))
            fi ;;
        stats)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--json -h --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -f -- "$cur"))
            fi ;;
        check)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--seconds --block --readers --direct --json --processes --lib -h --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -d -- "$cur"))
            fi ;;
        agent)
            COMPREPLY=($(compgen -W "--shm -f --foreground -g --grants -h --help" -- "$cur")) ;;
        clean)
            COMPREPLY=($(compgen -W "--shm --force -h --help" -- "$cur")) ;;
    esac
}
complete -F _rangeshim rangeshim
