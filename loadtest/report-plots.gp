# The plots of the strategy comparison report (loadtest/report). Run by the report as
#   gnuplot -e "datadir='DIR'; outdir='DIR'; stock_modes='none zk'; subtitle='LOAD'" \
#       report-plots.gp
# and reads the data it wrote from report.json:
#   DIR/modes.tsv       mode, throughput (req/s), p50 ms, p99 ms; one line per mode
#   DIR/stock-M.tsv     seconds since the load started, stock; one line per sample
# It writes throughput.png, p99.png and stock.png to outdir. pngcairo draws smoother
# text and lines, but gnuplot-nox builds may lack it, so plain png is the fallback.

if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,520 noenhanced font "Sans,10"
} else {
    set terminal png size 900,520 noenhanced
}
set datafile separator "\t"
modes = datadir."/modes.tsv"

# ---------------------------------------------------------------- bar charts

set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.8
set grid ytics
set yrange [0:*]
set xtics nomirror
set key top left

set output outdir."/throughput.png"
set title "Throughput by lock mode (all requests, deducted and sold out)\n".subtitle
set ylabel "requests per second"
set offsets 0, 0, graph 0.08, 0
plot modes using 2:xtic(1) notitle linecolor rgb "#4477aa", \
     "" using 0:2:(sprintf("%.0f", $2)) with labels offset 0,0.8 notitle

set output outdir."/p99.png"
set title "Latency by lock mode (stockload, every answered request)\n".subtitle
set ylabel "milliseconds"
plot modes using 3:xtic(1) title "p50" linecolor rgb "#88ccee", \
     "" using 4 title "p99" linecolor rgb "#cc6677", \
     "" using ($0 - 1.0/6):3:(sprintf("%.0f", $3)) with labels offset 0,0.8 notitle, \
     "" using ($0 + 1.0/6):4:(sprintf("%.0f", $4)) with labels offset 0,0.8 notitle

# ---------------------------------------------------------------- stock over time

if (strlen(stock_modes) > 0) {
    set style data steps
    set offsets 0, 0, 0, 0
    set yrange [*:*]
    set grid xtics ytics
    set key top right
    set output outdir."/stock.png"
    set title "Stock of the hot product while the load runs\n".subtitle
    set xlabel "seconds since the load started"
    set ylabel "stock"
    set xzeroaxis linetype 1 linecolor rgb "#888888" linewidth 1.5
    # Steps, since the stock is known only at the samples; the points mark them.
    plot for [i = 1:words(stock_modes)] datadir."/stock-".word(stock_modes, i).".tsv" \
             using 1:2 with steps linewidth 2 linecolor i title "lock ".word(stock_modes, i), \
         for [i = 1:words(stock_modes)] datadir."/stock-".word(stock_modes, i).".tsv" \
             using 1:2 with points pointtype 7 pointsize 0.6 linecolor i notitle
}
