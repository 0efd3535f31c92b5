#!/bin/sh
# packaging/fixpaths.sh PLUGIN_DIR CLI_DOC_DIR < IN > OUT
#
# Rewrites the paths in the files of etc/ that are written for `make install`
# into /usr/local (systemd units, the MailProg wrapper, the plugstack example)
# for a distribution package installed into /usr: programs in /usr/bin, the
# plugin in the distribution's Slurm plugin directory PLUGIN_DIR, the CLI's
# guides in CLI_DOC_DIR.  Used by debian/rules and packaging/rpm/joulestep.spec.
set -eu
exec sed -e "s|/usr/local/share/doc/joulestep/|$2/|g" \
         -e "s|/usr/local/lib/slurm/joulestep\.so|$1/joulestep.so|g" \
         -e 's|/usr/local/|/usr/|g'
