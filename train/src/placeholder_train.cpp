// placeholder until the first real source of halogen::train lands; removed then
