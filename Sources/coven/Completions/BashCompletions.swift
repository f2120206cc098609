import Foundation

/// The bash completion script: three generated tables (`_coven_options`, `_coven_option_value`,
/// `_coven_argument`) and a fixed driver, `_coven`, that reads the words before the cursor the
/// way coven's parser does (global options anywhere, `--opt=value`, bundled short flags, `--`).
///
/// Needs bash 4.4 or later (`mapfile`, `compopt`), and nothing from the bash-completion package.
struct BashCompletions {
    let dump: RegistryDump

    func render() -> String {
        let commands = dump.completableCommands
        var text = """
        # bash completion for \(dump.name)                                 -*- shell-script -*-
        # \(Completions.banner(.bash, dump))
        # Install: copy to $(pkg-config --variable=completionsdir bash-completion)/coven (for
        # example /usr/share/bash-completion/completions/coven), or source it from ~/.bashrc.

        # The command words.
        _coven_commands() {
            echo \(commands.map { quote($0.name) }.joined(separator: " "))
        }

        # The option words of COMMAND ('' is coven itself, before any command).
        _coven_options() {
            case $1 in
                '') echo \(optionWords(dump.globalOptions + [Completions.versionOption])) ;;

        """
        for command in commands {
            text += "        \(quote(command.name))) echo \(optionWords(dump.optionTable(command))) ;;\n"
        }
        text += """
            esac
        }

        # How the value of OPTION (`--long` or `-s`) of COMMAND completes: prints
        # "KIND [CHOICE...]" with KIND file, directory, file-id, choice or none; fails for a flag.
        _coven_option_value() {
            case $2 in

        """
        text += valueCases(dump.globalOptions, indent: "        ")
        text += """
            esac
            case $1 in

        """
        for command in commands where command.options.contains(where: { $0.value != nil }) {
            text += "        \(quote(command.name)))\n            case $2 in\n"
            text += valueCases(command.options, indent: "                ")
            text += "            esac ;;\n"
        }
        text += """
            esac
            return 1
        }

        # How the positional argument at INDEX (from 0) of COMMAND completes: "KIND [CHOICE...]".
        _coven_argument() {
            case $1 in

        """
        for command in commands where !command.arguments.isEmpty {
            text += "        \(quote(command.name)))\n            case $2 in\n"
            for (index, argument) in command.arguments.enumerated() {
                let pattern = argument.repeating && index == command.arguments.count - 1 ? "*" : String(index)
                text += "                \(pattern)) echo \(spec(argument.completion, argument.choices)) ;;\n"
            }
            text += "            esac ;;\n"
        }
        text += """
            esac
        }

        \(Self.driver)
        """
        return text
    }

    /// `--db --json -q …` for compgen.
    private func optionWords(_ options: [OptionSpec]) -> String {
        options.flatMap { option in ["--" + option.long] + (option.short.map { ["-" + $0] } ?? []) }
            .map(quote).joined(separator: " ")
    }

    /// `--place|-p) echo 'choice cloud device-only'; return 0 ;;` for each option taking a value.
    private func valueCases(_ options: [OptionSpec], indent: String) -> String {
        var text = ""
        for option in options where option.value != nil {
            let pattern = (["--" + option.long] + (option.short.map { ["-" + $0] } ?? [])).joined(separator: "|")
            text += "\(indent)\(pattern)) echo \(spec(option.completion, option.choices)); return 0 ;;\n"
        }
        return text
    }

    private func spec(_ completion: Completion, _ choices: [String]) -> String {
        quote(([Completions.kind(completion, choices: choices)] + choices).joined(separator: " "))
    }

    /// Single-quotes a word for bash.
    private func quote(_ word: String) -> String {
        "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// The fixed part: the word scanner, the reply helper, file ids and the registration.
    static let driver = #"""
    # The file ids of the device named by --db (else COVEN_DB, else the default), one a line;
    # nothing when coven cannot read them.
    _coven_file_ids() {
        local -a db=()
        [[ -n $_coven_db ]] && db=(--db "$_coven_db")
        command coven sql "${db[@]}" -z 'SELECT id FROM coven_files' 2>/dev/null | tr '\0' '\n'
    }

    # Whether option word WORD of COMMAND leaves its value to the next word.
    _coven_wants_value() {
        local command=$1 word=$2 i
        [[ $word == *=* ]] && return 1
        if [[ $word == --* ]]; then
            _coven_option_value "$command" "$word" >/dev/null
            return
        fi
        for ((i = 1; i < ${#word}; i++)); do
            if _coven_option_value "$command" "-${word:i:1}" >/dev/null; then
                ((i == ${#word} - 1))
                return
            fi
        done
        return 1
    }

    # Sets COMPREPLY from CUR and "KIND [CHOICE...]".
    _coven_reply() {
        local cur=$1 kind=$2
        shift 2
        case $kind in
            file) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;
            directory) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -d -- "$cur") ;;
            file-id) mapfile -t COMPREPLY < <(compgen -W "$(_coven_file_ids)" -- "$cur") ;;
            choice) mapfile -t COMPREPLY < <(compgen -W "$*" -- "$cur") ;;
            *) COMPREPLY=() ;;
        esac
    }

    _coven() {
        local cur=${COMP_WORDS[COMP_CWORD]}
        [[ $cur == = ]] && cur=
        # Rejoin what COMP_WORDBREAKS split apart: "--db" "=" "x" is the one word "--db=x",
        # and "a" "=" "1" the one word "a=1".
        local -a words=()
        local i word glue=0
        for ((i = 1; i <= COMP_CWORD; i++)); do
            word=${COMP_WORDS[i]}
            if ((${#words[@]})) && [[ $word == = ]]; then
                words[-1]+='='
                glue=1
            elif ((glue)); then
                words[-1]+=$word
                glue=0
            else
                words+=("$word")
            fi
        done
        local current=${words[-1]}
        unset 'words[-1]'
        # Read the words before the cursor as coven's parser does.
        local command= _coven_db= expect= ended=0 position=0
        for word in "${words[@]}"; do
            if [[ -n $expect ]]; then
                [[ $expect == --db ]] && _coven_db=$word
                expect=
            elif ((!ended)) && [[ $word == -- ]]; then
                ended=1
            elif ((!ended)) && [[ $word == -?* ]]; then
                [[ $word == --db=* ]] && _coven_db=${word#--db=}
                if _coven_wants_value "$command" "$word"; then
                    if [[ $word == --* ]]; then expect=$word; else expect=-${word: -1}; fi
                fi
            elif [[ -z $command ]]; then
                command=$word
            else
                position=$((position + 1))
            fi
        done
        [[ $_coven_db == '~/'* ]] && _coven_db=$HOME/${_coven_db#'~/'}
        local spec
        if [[ -n $expect ]]; then
            spec=$(_coven_option_value "$command" "$expect")
        elif ((!ended)) && [[ $current == --*=* ]]; then
            spec=$(_coven_option_value "$command" "${current%%=*}")
        elif ((!ended)) && [[ $current == -* ]]; then
            mapfile -t COMPREPLY < <(compgen -W "$(_coven_options "$command")" -- "$current")
            return 0
        elif [[ -z $command ]]; then
            mapfile -t COMPREPLY < <(compgen -W "$(_coven_commands)" -- "$cur")
            return 0
        else
            spec=$(_coven_argument "$command" "$position")
        fi
        # shellcheck disable=SC2086 # KIND and the choices are separate words
        _coven_reply "$cur" $spec
    }

    complete -F _coven coven

    """#
}
